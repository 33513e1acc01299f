"""A real Kueue manager queues an elastic PyTorchJob; the operator and the engine play along.

Kueue (built from its Go module, see `tests/support/kueue.py`) suspends the labelled job at
creation through its webhook, admits it when its ClusterQueue's quota allows by unsuspending it
with the ResourceFlavor's node labels and tolerations injected into the pod templates; the
operator then creates pods from those templates. The real engine process meanwhile resizes an
unlabelled twin with the same throughput curve and never writes the queued job's count.
"""

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import Kube
from autoscaler.controller.runner import Operator
from autoscaler.observability.decision_log import read_decision_log
from tests.integration.test_operator import Cluster, elastic_job
from tests.support.apply import RestMapper, apply
from tests.support.controlplane import ControlPlane
from tests.support.engine_process import engine_config, engine_process
from tests.support.kueue import (
    GROUP,
    VERSION,
    KueueManager,
    running_kueue,
    workload_of,
)
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusServer
from tests.support.training import GPU, Kubelet, Trainer, remove_jobs_and_pods

KUEUE = f"{GROUP}/{VERSION}"
POOL_LABEL = "pool.example.com/name"
TOLERATION = {"key": "pool.example.com/reserved", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def kueue(
    control_plane: ControlPlane,
    crd: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KueueManager]:
    """Kueue, started once the PyTorchJob CRD is Established (so its integration starts at once)."""
    workdir = tmp_path_factory.mktemp("kueue")
    with running_kueue(control_plane.kubeconfig_path, workdir) as manager:
        yield manager


def queue_objects(namespace: str, *, gpus: int) -> list[dict[str, Any]]:
    """A ResourceFlavor with a node label and a toleration, a ClusterQueue of `gpus` GPUs in it,
    and the namespace's LocalQueue `team` pointing there."""
    flavor = f"pool-{namespace}"
    return [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {POOL_LABEL: "a"}, "tolerations": [TOLERATION]},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{namespace}"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": namespace},
            "spec": {"clusterQueue": f"cq-{namespace}"},
        },
    ]


def gpu_job(name: str, *, queue: str | None) -> dict[str, Any]:
    job = elastic_job(name, replicas=2, low=1, high=4, maxRestarts=50)
    container = job["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {GPU: "1"}}
    if queue is not None:
        job["metadata"]["labels"] = {c.LABEL_KUEUE_QUEUE_NAME: queue}
    return job


def condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((cond for cond in conditions if cond["type"] == type_), None)


def admitted(workload: dict[str, Any] | None) -> bool:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return any(cond["type"] == "Admitted" and cond["status"] == "True" for cond in conditions)


@pytest.fixture
def cluster(kube_api: client.ApiClient, namespace: str, operator: Operator) -> Cluster:
    return Cluster(kube_api, namespace)


@dataclass
class Queues:
    """The namespace's queue objects, applied; `quota` changes the ClusterQueue's GPUs."""

    mapper: RestMapper
    objects: list[dict[str, Any]]

    def quota(self, gpus: int) -> None:
        cluster_queue = self.objects[1]
        cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = (
            gpus
        )
        apply(self.mapper, cluster_queue)


@pytest.fixture
def queues(cluster: Cluster, kueue: KueueManager) -> Queues:
    """No quota yet: a queued job waits. (Left in place: Kueue's finalizers would hold their
    deletion until the Workloads go, which needs the garbage collector.)"""
    queues = Queues(RestMapper(Kube(cluster.api)), queue_objects(cluster.ns, gpus=0))
    for obj in queues.objects:
        apply(queues.mapper, obj)
    return queues


def workers(cluster: Cluster, name: str) -> int:
    replicas: int = cluster.job(name)["spec"]["pytorchReplicaSpecs"][c.WORKER]["replicas"]
    return replicas


def test_kueue_suspends_admits_and_keeps_the_size_of_a_queued_elastic_job(
    control_plane: ControlPlane,
    cluster: Cluster,
    queues: Queues,
    prometheus: PrometheusServer,
    tmp_path: Path,
) -> None:
    kube = Kube(cluster.api)
    with ExitStack() as stack:
        stack.callback(remove_jobs_and_pods, cluster.api, cluster.ns)
        stack.enter_context(Kubelet(cluster.api, cluster.ns))
        uid = queued_and_waiting(cluster, kube)
        queues.quota(4)  # room for its two GPUs
        admitted_with_kueues_templates(cluster, kube, uid)
        for name in ("queued", "free"):
            trainer = stack.enter_context(
                Trainer(cluster.api, namespace=cluster.ns, name=name, curve=lambda n: 100.0 * n)
            )
            prometheus.add_target(trainer.target, job="training", labels={"test": cluster.ns})
            stack.callback(prometheus.remove_target, trainer.target, job="training")
        metrics, decisions = resized_twin(control_plane, cluster, prometheus, tmp_path)
        assert 'autoscaler_decisions_total{reason="ManagedByKueue"}' in metrics
        assert workers(cluster, "queued") == 2
        assert {record["name"] for record in decisions} == {"free"}
        assert admitted(workload_of(kube, cluster.ns, uid)), "Kueue evicted the job"
        assert set(cluster.pods("queued")) == {"queued-worker-0", "queued-worker-1"}
        explained = explain(control_plane, f"{cluster.ns}/queued")
        assert "Owner:     kueue (ManagedByKueue:" in explained
        assert "Queue:     team (Kueue LocalQueue)" in explained
        requeued_after_a_resize(cluster, kube, uid)


def queued_and_waiting(cluster: Cluster, kube: Kube) -> str:
    """Created: Kueue's webhook suspends it, its Workload waits for quota, it has no pods.
    Returns its uid."""
    created = cluster.create(gpu_job("queued", queue="team"))
    assert created["spec"]["runPolicy"]["suspend"] is True, "Kueue's webhook did not run"
    uid: str = created["metadata"]["uid"]
    workload = wait_for(
        lambda: workload_of(kube, cluster.ns, uid), what="Kueue's Workload of the job"
    )
    assert [podset["count"] for podset in workload["spec"]["podSets"]] == [2]
    wait_for(
        lambda: (
            (cond := condition(cluster.job("queued"), "Suspended")) is not None
            and cond["status"] == "True"
        ),
        what="the operator's Suspended condition",
    )
    assert cluster.pods("queued") == {}
    assert not admitted(workload_of(kube, cluster.ns, uid))
    return uid


def admitted_with_kueues_templates(cluster: Cluster, kube: Kube, uid: str) -> None:
    """Admitted and unsuspended: the pods carry the flavor's node label and toleration."""
    wait_for(lambda: admitted(workload_of(kube, cluster.ns, uid)), what="Kueue to admit it")
    pods = cluster.wait_pods("queued", {"queued-worker-0", "queued-worker-1"})
    for pod in pods.values():
        assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "a"}
        assert TOLERATION in pod["spec"]["tolerations"]
    assert cluster.job("queued")["spec"]["runPolicy"]["suspend"] is False
    wait_for(  # the status is written after the pass's creates
        lambda: (
            (cond := condition(cluster.job("queued"), "Suspended")) is not None
            and (cond["status"], cond["reason"]) == ("False", "PyTorchJobResumed")
        ),
        what="the operator's Suspended=False condition",
    )
    wait_for(
        lambda: (
            (cond := condition(cluster.job("queued"), "Running")) is not None
            and cond["status"] == "True"
        ),
        what="the Running condition Kueue reads as PodsReady",
    )


def requeued_after_a_resize(cluster: Cluster, kube: Kube, uid: str) -> None:
    """Why the engine must keep out: a write through /scale (what the engine would do) makes
    Kueue stop the job, delete its Workload and queue a new one for the new count."""
    admitted_before = workload_of(kube, cluster.ns, uid)
    assert admitted_before is not None
    cluster.scale("queued", 3)

    def readmitted() -> dict[str, Any] | None:
        workload = workload_of(kube, cluster.ns, uid)
        replaced = (
            workload is not None
            and workload["metadata"]["uid"] != admitted_before["metadata"]["uid"]
        )
        return workload if replaced and admitted(workload) else None

    workload = wait_for(readmitted, what="a new Workload for 3 workers, admitted")
    assert [podset["count"] for podset in workload["spec"]["podSets"]] == [3]
    assert {"Stopped", "DeletedWorkload"} <= set(cluster.events("queued"))
    wait_for(  # created, then stopped; the operator sends its Events off the reconcile path
        lambda: cluster.events("queued").count("PyTorchJobSuspended") == 2,
        what="the operator's second PyTorchJobSuspended Event",
    )
    cluster.wait_pods("queued", {f"queued-worker-{i}" for i in range(3)})


def resized_twin(
    control_plane: ControlPlane, cluster: Cluster, prometheus: PrometheusServer, workdir: Path
) -> tuple[str, list[dict[str, Any]]]:
    """The engine process, until it has scaled the unlabelled twin from 2 to its maximum of 4;
    returns its /metrics then and its decision log."""
    cluster.create(gpu_job("free", queue=None))
    decisions = workdir / "decisions.jsonl"
    config = engine_config(
        namespace=cluster.ns,
        prometheus_url=prometheus.url,
        capacity={GPU: 16},
        decision_log=decisions,
    )
    with engine_process(
        config,
        kubeconfig=control_plane.kubeconfig_path,
        lease_namespace=cluster.ns,
        workdir=workdir,
    ) as engine:
        wait_for(lambda: workers(cluster, "free") == 4, timeout=120, what="the twin at 4")
        status, metrics = engine.get("/metrics")
    assert status == 200
    return metrics, list(read_decision_log(decisions))


def explain(control_plane: ControlPlane, job: str) -> str:
    argv = [sys.executable, "-m", "autoscaler", "explain", job]
    argv += ["--kubeconfig", str(control_plane.kubeconfig_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout
