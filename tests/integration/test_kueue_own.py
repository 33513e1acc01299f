"""The operator's own Kueue integration (`--kueue`) against a real Kueue manager whose built-in
PyTorchJob integration is off and which lists PyTorchJob as an external framework.

Nothing of Kueue's touches a PyTorchJob here: the operator suspends a labelled job itself,
creates its Workload, starts it on admission with the flavour's node label and toleration,
stops it when Kueue evicts or preempts the Workload and hands the quota back, and finishes the
Workload with the job. Kueue's scheduler decides every admission.
"""

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.clients.engine_cluster import KubeCluster
from autoscaler.clients.kube import WORKLOADS, Kube, NotFoundError, Resource
from autoscaler.controller import kueue as own
from autoscaler.controller.runner import Operator
from tests.integration.test_kueue import (
    POOL_LABEL,
    TOLERATION,
    Queues,
    admitted,
    condition,
    gpu_job,
    queue_objects,
)
from tests.integration.test_operator import Cluster, passes_later
from tests.support.apply import RestMapper, apply
from tests.support.controlplane import ControlPlane
from tests.support.kueue import KueueManager, running_kueue, workload_of
from tests.support.polling import wait_for
from tests.support.training import Kubelet, remove_jobs_and_pods

JSON = dict[str, Any]
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses")


@pytest.fixture(scope="module")
def kueue(
    control_plane: ControlPlane,
    crd: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KueueManager]:
    """Kueue with PyTorchJob as an external framework, its Kubeflow integration off."""
    workdir = tmp_path_factory.mktemp("kueue-own")
    with running_kueue(control_plane.kubeconfig_path, workdir, own_integration=True) as manager:
        yield manager


@pytest.fixture(scope="module")
def queueing_operator(operator: Operator, kueue: KueueManager) -> Iterator[Operator]:
    """The session's operator with `--kueue` on for this module (one operator per cluster: a
    second one would race it for the same jobs)."""
    before = operator.config
    operator.config = dataclasses.replace(before, kueue=True)
    operator.watch_kueue_if_served()
    try:
        yield operator
    finally:
        operator.config = before


@pytest.fixture
def cluster(kube_api: client.ApiClient, namespace: str, queueing_operator: Operator) -> Cluster:
    return Cluster(kube_api, namespace)


@pytest.fixture
def queues(cluster: Cluster, kueue: KueueManager) -> Queues:
    queues = Queues(RestMapper(Kube(cluster.api)), queue_objects(cluster.ns, gpus=0))
    for obj in queues.objects:
        apply(queues.mapper, obj)
    return queues


@pytest.fixture
def running(cluster: Cluster) -> Iterator[ExitStack]:
    with ExitStack() as stack:
        stack.callback(remove_jobs_and_pods, cluster.api, cluster.ns)
        stack.enter_context(Kubelet(cluster.api, cluster.ns))
        yield stack


def workload(cluster: Cluster, name: str) -> JSON:
    kube = Kube(cluster.api)
    uid = cluster.job(name)["metadata"]["uid"]
    return wait_for(lambda: workload_of(kube, cluster.ns, uid), what=f"the Workload of {name}")


def wait_admitted(cluster: Cluster, name: str) -> JSON:
    kube = Kube(cluster.api)
    uid = cluster.job(name)["metadata"]["uid"]
    found: JSON = wait_for(
        lambda: (w := workload_of(kube, cluster.ns, uid)) is not None and admitted(w) and w,
        what=f"Kueue to admit {name}",
    )
    return found


def wait_running(cluster: Cluster, name: str, workers: int) -> dict[str, JSON]:
    pods = cluster.wait_pods(name, {f"{name}-worker-{i}" for i in range(workers)})
    wait_for(
        lambda: (
            (cond := condition(cluster.job(name), "Running")) is not None
            and cond["status"] == "True"
        ),
        what=f"{name} Running",
    )
    return pods


def wait_stopped(cluster: Cluster, name: str) -> None:
    wait_for(lambda: cluster.job(name)["spec"]["runPolicy"]["suspend"] is True, what="suspended")
    cluster.wait_pods(name, set())


def test_held_admitted_with_the_flavour_finished_and_the_quota_handed_on(
    cluster: Cluster, queues: Queues, running: ExitStack
) -> None:
    created = cluster.create(gpu_job("first", queue="team"))
    assert not created["spec"].get("runPolicy", {}).get("suspend"), "no Kueue webhook runs"
    held = workload(cluster, "first")
    assert cluster.job("first")["spec"]["runPolicy"]["suspend"] is True
    assert held["spec"]["queueName"] == "team"
    assert [(ps["name"], ps["count"]) for ps in held["spec"]["podSets"]] == [("worker", 2)]
    ref = held["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == (
        c.KIND,
        created["metadata"]["uid"],
        True,
    )
    assert cluster.pods("first") == {}, "pods before admission"

    queues.quota(2)
    wait_admitted(cluster, "first")
    for pod in wait_running(cluster, "first", 2).values():
        assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "a"}
        assert TOLERATION in pod["spec"]["tolerations"]
    assert "Started" in cluster.events("first")

    cluster.create(gpu_job("second", queue="team"))
    waiting = workload(cluster, "second")
    assert cluster.pods("second") == {}
    assert not admitted(waiting)

    for pod in cluster.pods("first"):
        cluster.set_phase(pod, "Succeeded")
    first_uid = created["metadata"]["uid"]
    kube = Kube(cluster.api)
    wait_for(
        lambda: own.has(workload_of(kube, cluster.ns, first_uid) or {}, own.FINISHED),
        what="the first Workload Finished",
    )
    wait_admitted(cluster, "second")
    wait_running(cluster, "second", 2)

    cluster.jobs.delete_namespaced_custom_object(c.GROUP, c.VERSION, cluster.ns, c.PLURAL, "first")
    wait_for(lambda: workload_of(kube, cluster.ns, first_uid) is None, what="its Workload gone")


def test_a_higher_priority_job_preempts_and_the_preempted_one_is_requeued(
    cluster: Cluster, queues: Queues, running: ExitStack, kube_api: client.ApiClient
) -> None:
    kube = Kube(kube_api)
    names = [f"{cluster.ns}-low", f"{cluster.ns}-high"]
    for name, value in zip(names, (10, 1000), strict=True):
        kube.create(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
            resource=PRIORITY_CLASSES,
        )
        running.callback(_delete_priority_class, kube, name)
    cluster_queue = queues.objects[1]
    cluster_queue["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    queues.quota(2)

    def job(name: str, priority_class: str) -> JSON:
        manifest = gpu_job(name, queue="team")
        worker = manifest["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]
        worker["priorityClassName"] = priority_class
        return manifest

    cluster.create(job("low", names[0]))
    low = wait_admitted(cluster, "low")
    assert (low["spec"]["priority"], low["spec"]["priorityClassRef"]["name"]) == (10, names[0])
    wait_running(cluster, "low", 2)

    cluster.create(job("high", names[1]))
    wait_stopped(cluster, "low")
    high = wait_admitted(cluster, "high")
    assert high["spec"]["priority"] == 1000
    wait_running(cluster, "high", 2)
    low = workload(cluster, "low")
    assert not admitted(low)
    requeued = next(cond for cond in low["status"]["conditions"] if cond["type"] == own.REQUEUED)
    assert (requeued["status"], requeued["reason"]) == ("True", own.PREEMPTED)
    evicted = next(cond for cond in low["status"]["conditions"] if cond["type"] == own.EVICTED)
    assert evicted["reason"] == own.PREEMPTED
    template = cluster.job("low")["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]
    assert "nodeSelector" not in template, "the flavour's node label stayed after the stop"
    assert TOLERATION not in (template.get("tolerations") or [])


def test_an_evicted_job_stops_hands_its_quota_back_and_is_readmitted(
    cluster: Cluster, queues: Queues, running: ExitStack
) -> None:
    queues.quota(2)
    cluster.create(gpu_job("drained", queue="team"))
    first = wait_admitted(cluster, "drained")
    wait_running(cluster, "drained", 2)

    cluster_queue = queues.objects[1]
    cluster_queue["spec"]["stopPolicy"] = "HoldAndDrain"
    apply(queues.mapper, cluster_queue)
    wait_stopped(cluster, "drained")
    kube = Kube(cluster.api)
    uid = cluster.job("drained")["metadata"]["uid"]
    wait_for(
        lambda: not own.reserved(workload_of(kube, cluster.ns, uid) or first),
        what="the quota handed back",
    )
    assert "Stopped" in cluster.events("drained")

    cluster_queue["spec"]["stopPolicy"] = "None"
    apply(queues.mapper, cluster_queue)
    again = wait_admitted(cluster, "drained")
    assert again["metadata"]["uid"] == first["metadata"]["uid"], "requeued, not replaced"
    wait_running(cluster, "drained", 2)


def _delete_priority_class(kube: Kube, name: str) -> None:
    with suppress(NotFoundError):
        kube.delete(PRIORITY_CLASSES, "", name)


# -- elastic under quota: workload slices ----------------------------------------------------


class QuotaWatch:
    """Samples the namespace's Workloads while a test runs: at every sample, the GPUs its jobs
    hold (per job its current slice, as Kueue's scheduler counts a replaced one no more) must
    stay within the ClusterQueue's quota."""

    def __init__(self, kube: Kube, namespace: str, *, quota: int) -> None:
        self.kube, self.namespace, self.quota = kube, namespace, quota
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "QuotaWatch":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def held(self) -> int:
        path = WORKLOADS.path(self.namespace)
        by_job: dict[str, list[JSON]] = {}
        for workload in self.kube.request("GET", path).get("items") or []:
            owner = workload["metadata"]["ownerReferences"][0]["uid"]
            by_job.setdefault(owner, []).append(workload)
        total = 0
        for workloads in by_job.values():
            current, _ = own.chain(workloads)
            if current is not None:
                total += sum(own.counts(current).values())  # one GPU a pod
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self.held())


def elastic_gpu_job(name: str, *, workers: int) -> JSON:
    manifest = gpu_job(name, queue="team")
    manifest["spec"]["pytorchReplicaSpecs"][c.WORKER]["replicas"] = workers
    manifest["metadata"]["annotations"] = {own.ANNOTATION_ELASTIC: "true"}
    return manifest


def engine_headroom(engine_view: KubeCluster, name: str) -> int | None:
    """The workers more the engine would offer `name` this round, as its quota admits."""
    return next(job.quota_headroom for job in engine_view.jobs() if job.name == name)


def transition(workload: JSON, type_: str) -> str:
    cond = next(c_ for c_ in workload["status"]["conditions"] if c_["type"] == type_)
    assert cond["status"] == "True", cond
    when: str = cond["lastTransitionTime"]
    return when


def test_an_elastic_scale_up_waits_for_quota_and_a_scale_down_frees_it_at_once(
    cluster: Cluster, queues: Queues, running: ExitStack, queueing_operator: Operator
) -> None:
    kube = Kube(cluster.api)
    queues.quota(4)
    watch = running.enter_context(QuotaWatch(kube, cluster.ns, quota=4))
    cluster.create(elastic_gpu_job("grow", workers=2))
    first = wait_admitted(cluster, "grow")
    assert first["metadata"]["annotations"][own.ANNOTATION_ELASTIC] == "true"
    wait_running(cluster, "grow", 2)
    cluster.create(gpu_job("other", queue="team"))
    wait_admitted(cluster, "other")
    wait_running(cluster, "other", 2)
    engine_view = KubeCluster(kube, namespaces=[cluster.ns])
    running.callback(engine_view.close)
    wait_for(
        lambda: engine_headroom(engine_view, "grow") == 0,
        what="the engine offering no scale-up while the quota is full",
    )

    cluster.scale("grow", 3)  # a scale-up sent anyway waits as a slice
    uid = cluster.job("grow")["metadata"]["uid"]

    def slices() -> list[JSON]:
        items = kube.request("GET", WORKLOADS.path(cluster.ns)).get("items") or []
        return [w for w in items if w["metadata"]["ownerReferences"][0]["uid"] == uid]

    pending = wait_for(
        lambda: next(
            (w for w in slices() if own.ANNOTATION_REPLACEMENT_FOR in w["metadata"]["annotations"]),
            None,
        ),
        what="a new Workload slice for 3 workers",
    )
    assert pending["metadata"]["annotations"][own.ANNOTATION_REPLACEMENT_FOR] == own.key(first)
    assert own.counts(pending) == {"worker": 3}
    passes_later(queueing_operator, 5)
    assert not own.reserved(kube.get(WORKLOADS, cluster.ns, pending["metadata"]["name"]))
    assert set(cluster.pods("grow")) == {"grow-worker-0", "grow-worker-1"}, "a pod unadmitted"
    waits = condition(cluster.job("grow"), c.CONDITION_QUOTA_ADMITTED)
    assert waits is not None
    assert (waits["status"], waits["reason"]) == ("False", "WorkloadSlicePending")

    for pod in cluster.pods("other"):
        cluster.set_phase(pod, "Succeeded")
    admitted_slice = wait_for(
        lambda: admitted(w := kube.get(WORKLOADS, cluster.ns, pending["metadata"]["name"])) and w,
        what="the new slice admitted once the other job's quota is free",
    )
    wait_running(cluster, "grow", 3)
    wait_for(
        lambda: condition(cluster.job("grow"), c.CONDITION_QUOTA_ADMITTED) is None,
        what="the QuotaAdmitted condition gone with the admission",
    )
    wait_for(
        lambda: engine_headroom(engine_view, "grow") == 1,
        what="the engine offering the one GPU left in the quota",
    )
    replaced = kube.get(WORKLOADS, cluster.ns, first["metadata"]["name"])
    assert own.has(replaced, own.FINISHED)
    other = workload(cluster, "other")
    assert transition(admitted_slice, own.QUOTA_RESERVED) >= transition(other, own.FINISHED)

    cluster.create(gpu_job("waiter", queue="team"))  # 2 GPUs; 1 free
    waiting = workload(cluster, "waiter")
    passes_later(queueing_operator, 3)
    assert not admitted(kube.get(WORKLOADS, cluster.ns, waiting["metadata"]["name"]))
    cluster.scale("grow", 1)
    wait_admitted(cluster, "waiter")
    shrunk = kube.get(WORKLOADS, cluster.ns, admitted_slice["metadata"]["name"])
    assert own.counts(shrunk) == {"worker": 1}, "shrunk in place, not replaced"
    assert admitted(shrunk)
    cluster.wait_pods("grow", {"grow-worker-0"})
    wait_running(cluster, "waiter", 2)
    watch.__exit__()
    assert watch.samples, "the quota was never sampled"
    assert max(watch.samples) <= watch.quota, f"over quota: {max(watch.samples)} GPUs"
    print(f"quota samples: {len(watch.samples)}, most GPUs held at once: {max(watch.samples)}")
