"""The planned placement (`--planned-placement nvidia.com/gpu`) with the real kube-scheduler: an
elastic job's workers are held by their scheduling gate until they pack, pinned to the nodes the
operator chose, and moved when a growth needs other nodes.

A control plane of its own (the session's operator runs without the flag), with kube-scheduler,
the scheduler-plugins gang scheduler and, for the queued job, Kueue's manager, 4-GPU Nodes as
API objects (nothing runs the pods:
binding is what is measured), and filler pods bound straight to the nodes to take their room. A
reaper finishes the pods the operator deletes, the kubelet's part."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import PyTorchJob, default_job
from autoscaler.api import coordinates as c
from autoscaler.api.packing import nodes_needed
from autoscaler.clients.kube import WORKLOADS, Kube
from autoscaler.controller import kueue as own_kueue
from autoscaler.controller import planned_placement as pp
from autoscaler.controller.builders import PodSettings, desired_pod
from autoscaler.controller.placement import HOSTNAME
from autoscaler.controller.runner import Operator
from tests.integration.test_gang import PLUGINS, PLUGINS_CRD, podgroup
from tests.integration.test_gang import control_plane as own_control_plane
from tests.integration.test_gang import namespace as case_namespace
from tests.integration.test_gang import operator as own_operator
from tests.integration.test_kueue import POOL_LABEL, Queues, admitted, queue_objects
from tests.integration.test_kueue import gpu_job as kueue_gpu_job
from tests.integration.test_operator import Cluster
from tests.integration.test_packing import LABEL, NODE_GPUS, gpu_job, gpu_nodes, report_spread
from tests.support.apply import RestMapper, apply
from tests.support.controlplane import ControlPlane
from tests.support.gang_scheduler import PROFILE, SchedulerPlugins, scheduler_plugins_binary
from tests.support.kueue import KueueManager, running_kueue
from tests.support.node_agent import GPU
from tests.support.polling import wait_for

JSON = dict[str, Any]
CASE = "planned"
METRICS = "autoscaler_operator"


@contextmanager
def reaper(core: client.CoreV1Api, namespace: str) -> Iterator[None]:
    """Deletes for good every pod being deleted (no kubelet here finishes them)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.1):
            try:
                for pod in core.list_namespaced_pod(namespace).items:
                    if pod.metadata.deletion_timestamp is not None:
                        core.delete_namespaced_pod(
                            pod.metadata.name, namespace, grace_period_seconds=0
                        )
            except client.ApiException:
                continue

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def filler(core: client.CoreV1Api, namespace: str, name: str, *, node: str, gpus: int) -> None:
    """A pod bound straight to `node`, taking `gpus` of its room."""
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}
                ],
                "tolerations": [{"key": LABEL, "operator": "Exists"}],
            },
        },
    )


def workers(core: client.CoreV1Api, namespace: str, job: str) -> dict[int, JSON]:
    """The job's live workers by index."""
    selector = f"{c.LABEL_JOB_NAME}={job}"
    found = {}
    for pod in core.api_client.sanitize_for_serialization(
        core.list_namespaced_pod(namespace, label_selector=selector).items
    ):
        if not pod["metadata"].get("deletionTimestamp"):
            found[int(pod["metadata"]["labels"][c.LABEL_REPLICA_INDEX])] = pod
    return found


def placement(core: client.CoreV1Api, namespace: str, job: str) -> dict[int, str | None]:
    """Each live worker's node (None: not bound; gated ones too)."""
    return {
        index: pod["spec"].get("nodeName") for index, pod in workers(core, namespace, job).items()
    }


@pytest.fixture(scope="module")
def plane(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """A control plane of its own, with kube-scheduler and the scheduler-plugins scheduler."""
    binary = scheduler_plugins_binary()
    with own_control_plane(tmp_path_factory.mktemp("planned-plane"), PLUGINS_CRD) as (found, api):
        found.start_scheduler()
        gang = SchedulerPlugins(found, binary).start(api)
        try:
            yield found, api
        finally:
            gang.stop()


@contextmanager
def placing(
    plane: tuple[ControlPlane, client.ApiClient],
    case: str,
    nodes: int,
    gang: str = "",
    *,
    kueue: bool = False,
) -> Iterator[tuple[Cluster, list[str], Operator]]:
    """A namespace, `nodes` 4-GPU Nodes, an operator with the planned placement (and `gang`, its
    `--gang-scheduler-name`; `kueue`, its own Kueue integration) and a reaper."""
    control, api = plane
    pods = PodSettings(placement_resource=GPU)
    with (
        case_namespace(api, case) as cluster,
        gpu_nodes(api, case, count=nodes) as names,
        own_operator(control, gang, pods=pods, kueue=kueue) as operator,
        reaper(client.CoreV1Api(api), cluster.ns),
    ):
        yield cluster, names, operator


def test_workers_wait_until_they_pack_then_are_pinned_and_a_growth_moves_the_job(
    plane: tuple[ControlPlane, client.ApiClient],
) -> None:
    core = client.CoreV1Api(plane[1])
    with placing(plane, CASE, 3) as (cluster, (a, b, full), operator):
        ns = cluster.ns
        filler(core, ns, "on-a", node=a, gpus=2)
        filler(core, ns, "on-b", node=b, gpus=1)
        filler(core, ns, "on-full", node=full, gpus=4)
        # Room 2, 3 and 0: 4 workers pack nowhere, 3 do on b; the fourth waits, gated.
        cluster.create(gpu_job("x", 4, CASE))
        expected = {0: b, 1: b, 2: b, 3: None}
        wait_for(lambda: placement(core, ns, "x") == expected, what=f"x at {expected}")
        assert pp.gated(workers(core, ns, "x")[3])
        wait_for(
            lambda: "WorkersWaitForRoom" in cluster.events("x"),
            what="the Event saying a worker waits",
        )
        # Room on b again: the fourth is pinned beside the others.
        core.delete_namespaced_pod("on-b", ns, grace_period_seconds=0)
        expected = {0: b, 1: b, 2: b, 3: b}
        wait_for(lambda: placement(core, ns, "x") == expected, what=f"x at {expected}")
        assert workers(core, ns, "x")[3]["spec"]["nodeSelector"][HOSTNAME] == b
        # Down to 2, b filled by others, and the full node freed: growing to 4 needs a node
        # of its own, so the job moves there whole (worker-0 with it).
        cluster.scale("x", 2)
        wait_for(lambda: len(workers(core, ns, "x")) == 2, what="x down to 2")
        filler(core, ns, "on-b-again", node=b, gpus=2)
        core.delete_namespaced_pod("on-full", ns, grace_period_seconds=0)
        cluster.scale("x", 4)
        expected = {0: full, 1: full, 2: full, 3: full}
        wait_for(
            lambda: placement(core, ns, "x") == expected,
            timeout=60,
            what=f"x moved whole to {full}",
        )
        assert "WorkersPlaced" in cluster.events("x")
        sample = operator.metrics.registry.get_sample_value
        assert (sample(f"{METRICS}_placed_workers_total") or 0) >= 4 + 4  # the first, then moved
        assert (sample(f"{METRICS}_moved_workers_total") or 0) >= 2  # at least those on b
        wait_for(lambda: sample(f"{METRICS}_waiting_workers") == 0, what="no worker waiting")
        cluster.jobs.delete_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, "x")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)


def test_a_job_opted_out_of_the_engine_has_its_waiting_workers_released_to_the_scheduler(
    plane: tuple[ControlPlane, client.ApiClient],
) -> None:
    """The planned placement places only the jobs whose count the engine writes: a job opted out
    while a worker waits for room gets that worker's gate lifted, and kube-scheduler places it
    (here nowhere: the node has no GPU left)."""
    core = client.CoreV1Api(plane[1])
    case = f"{CASE}-opt-out"
    with placing(plane, case, 1) as (cluster, (node,), _):
        ns = cluster.ns
        filler(core, ns, "taken", node=node, gpus=3)
        cluster.create(gpu_job("w", 2, case))
        wait_for(lambda: placement(core, ns, "w") == {0: node, 1: None}, what="w's second held")
        assert pp.gated(workers(core, ns, "w")[1])
        cluster.patch("w", {"metadata": {"annotations": {c.ANNOTATION_OPT_OUT: "true"}}})
        wait_for(lambda: not pp.gated(workers(core, ns, "w")[1]), what="the gate lifted")
        assert placement(core, ns, "w") == {0: node, 1: None}  # no GPU left for it
        cluster.jobs.delete_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, "w")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)


def test_a_gang_scheduler_binds_the_workers_the_planned_placement_pinned(
    plane: tuple[ControlPlane, client.ApiClient],
) -> None:
    """With `--gang-scheduler-name` too, the scheduler-plugins scheduler binds what the placement
    pinned: a job of 4 (its gang, the minimum of 2) on room 3 and 2 runs 3 workers on one node as
    a gang, its fourth gated; once room frees there, the fourth joins them."""
    core = client.CoreV1Api(plane[1])
    case = f"{CASE}-gang"
    with placing(plane, case, 2, gang=PROFILE) as (cluster, (a, b), _):
        ns = cluster.ns
        filler(core, ns, "on-a", node=a, gpus=1)
        filler(core, ns, "on-b", node=b, gpus=2)
        job = gpu_job("g", 4, case)
        job["spec"]["elasticPolicy"]["minReplicas"] = 2
        cluster.create(job)
        expected = {0: a, 1: a, 2: a, 3: None}
        wait_for(lambda: placement(core, ns, "g") == expected, what=f"g's gang at {expected}")
        found = workers(core, ns, "g")
        assert {pod["spec"]["schedulerName"] for pod in found.values()} == {PROFILE}
        assert pp.gated(found[3])
        group = podgroup(plane[1], ns, "g", PLUGINS)
        assert group is not None
        assert group["spec"]["minMember"] == 2
        core.delete_namespaced_pod("on-a", ns, grace_period_seconds=0)
        expected = {0: a, 1: a, 2: a, 3: a}
        wait_for(lambda: placement(core, ns, "g") == expected, what=f"g at {expected}")
        cluster.jobs.delete_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, "g")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)


@pytest.fixture(scope="module")
def kueue(
    plane: tuple[ControlPlane, client.ApiClient], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KueueManager]:
    """Kueue's manager on the module's plane, PyTorchJob among its external frameworks (for the
    operator's own integration)."""
    workdir = tmp_path_factory.mktemp("planned-kueue")
    with running_kueue(plane[0].kubeconfig_path, workdir, own_integration=True) as manager:
        yield manager


def test_a_queued_elastic_job_is_placed_on_its_flavours_nodes_as_kueue_admits_each_slice(
    plane: tuple[ControlPlane, client.ApiClient], kueue: KueueManager
) -> None:
    """With `--kueue` too: an elastic job Kueue queues gets its workers once Kueue admits each
    of its slices, and the planned placement pins them within the flavour Kueue assigned (its
    node label merged into the template), packed: never on the emptier node outside it. Room 2
    and 3 in the flavour, 4 outside: 2 workers on one node; grown to 4, 3 on the node with room
    3, the fourth gated until room frees there."""
    core, api = client.CoreV1Api(plane[1]), plane[1]
    case = f"{CASE}-kueue"
    with placing(plane, case, 3, kueue=True) as (cluster, (a, b, outside), _):
        ns = cluster.ns
        for node in (a, b):
            core.patch_node(node, {"metadata": {"labels": {POOL_LABEL: "a"}}})
        queues = Queues(RestMapper(Kube(api)), queue_objects(ns, gpus=8))
        for obj in queues.objects:
            apply(queues.mapper, obj)
        filler(core, ns, "on-a", node=a, gpus=2)
        filler(core, ns, "on-b", node=b, gpus=1)
        job = kueue_gpu_job("q", queue="team")
        job["metadata"]["annotations"] = {own_kueue.ANNOTATION_ELASTIC: "true"}
        template = job["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]
        template["tolerations"] = [{"key": LABEL, "operator": "Equal", "value": case}]
        cluster.create(job)

        def bound_on_one_node() -> bool:
            nodes = set(placement(core, ns, "q").values())
            return len(nodes) == 1 and nodes <= {a, b}

        wait_for(bound_on_one_node, timeout=60, what="q's 2 workers on one node of the flavour")
        cluster.scale("q", 4)
        expected = {0: b, 1: b, 2: b, 3: None}
        wait_for(lambda: placement(core, ns, "q") == expected, timeout=60, what=f"q at {expected}")
        assert pp.gated(workers(core, ns, "q")[3])
        assert outside not in placement(core, ns, "q").values()
        slices = Kube(api).list(WORKLOADS, namespace=ns)["items"]
        assert any(admitted(w) and own_kueue.counts(w) == {"worker": 4} for w in slices)
        pool = {w["spec"]["nodeSelector"].get(POOL_LABEL) for w in workers(core, ns, "q").values()}
        assert pool == {"a"}, "the flavour's node label on every worker"
        core.delete_namespaced_pod("on-b", ns, grace_period_seconds=0)
        expected = {0: b, 1: b, 2: b, 3: b}
        wait_for(lambda: placement(core, ns, "q") == expected, what=f"q at {expected}")
        cluster.jobs.delete_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, "q")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)


JOBS = {"x": 4, "y": 2, "z": 2}  # job -> one-GPU workers
TAKEN = (1, 1, 2, 2, 4)  # GPUs taken on each of five 4-GPU nodes: room 3, 3, 2, 2 and 0


def test_in_a_fragmented_cluster_no_running_job_is_spread_with_the_planned_placement(
    plane: tuple[ControlPlane, client.ApiClient], request: pytest.FixtureRequest
) -> None:
    """Jobs of 4, 2 and 2 workers on room 3, 3, 2, 2 and 0: kube-scheduler with the packing
    affinity puts the job of 4 on two nodes; the planned placement runs 3 on one node and holds
    the fourth, and packs the others."""
    core, api = client.CoreV1Api(plane[1]), plane[1]
    case = f"{CASE}-many"
    with placing(plane, case, len(TAKEN)) as (cluster, nodes, _):
        for node, gpus in zip(nodes, TAKEN, strict=True):
            filler(core, cluster.ns, f"taken-{node}", node=node, gpus=gpus)
        for job, count in JOBS.items():
            cluster.create(gpu_job(job, count, case))
        held = {"x": 1}
        wait_for(
            lambda: all(
                sum(node is not None for node in placement(core, cluster.ns, job).values())
                == count - held.get(job, 0)
                for job, count in JOBS.items()
            ),
            what="every job's workers bound, but x's fourth",
        )
        planned = {job: placement(core, cluster.ns, job) for job in JOBS}
        for job in JOBS:
            cluster.jobs.delete_namespaced_custom_object(
                c.GROUP, c.VERSION, cluster.ns, c.PLURAL, job
            )
        core.delete_collection_namespaced_pod(cluster.ns, grace_period_seconds=0)
    scheduled = scheduler_alone(api, f"{CASE}-plain")
    shares = (spread_share(planned), spread_share(scheduled))
    line = (
        f"planned placement: running jobs spread over more nodes than they fill, jobs of "
        f"{', '.join(map(str, JOBS.values()))} one-GPU workers, {', '.join(map(str, TAKEN))} of"
        f" five nodes' {NODE_GPUS} GPUs taken: "
        f"{shares[0]:.0%} planned, {shares[1]:.0%} by kube-scheduler with the packing affinity"
    )
    report_spread(request, line, shares, evidence=(planned, scheduled))


def scheduler_alone(api: client.ApiClient, case: str) -> dict[str, dict[int, str | None]]:
    """The same jobs' pods as the operator builds them without the flag (packing affinity, no
    gate), placed by kube-scheduler alone on the same room."""
    core = client.CoreV1Api(api)
    with case_namespace(api, case) as cluster, gpu_nodes(api, case, count=len(TAKEN)) as nodes:
        for node, gpus in zip(nodes, TAKEN, strict=True):
            filler(core, cluster.ns, f"taken-{node}", node=node, gpus=gpus)
        for job, count in JOBS.items():
            manifest = gpu_job(job, count, case)
            manifest["metadata"]["namespace"] = cluster.ns
            built = default_job(PyTorchJob.model_validate(manifest))
            for index in range(count):
                pod = desired_pod(built, replica_type=c.WORKER, index=index)
                pod["metadata"].pop("ownerReferences")
                core.create_namespaced_pod(cluster.ns, pod)
        wait_for(
            lambda: all(
                None not in placement(core, cluster.ns, job).values()
                and len(placement(core, cluster.ns, job)) == count
                for job, count in JOBS.items()
            ),
            what="kube-scheduler to bind every worker",
        )
        found = {job: placement(core, cluster.ns, job) for job in JOBS}
        core.delete_collection_namespaced_pod(cluster.ns, grace_period_seconds=0)
    return found


def spread_share(jobs: dict[str, dict[int, str | None]]) -> float:
    """The share of jobs whose bound workers are on more nodes than their GPUs fill."""
    spread = 0
    for nodes in jobs.values():
        bound = [node for node in nodes.values() if node is not None]
        spread += len(set(bound)) > nodes_needed(len(bound), size=1, per_node=NODE_GPUS)
    return spread / len(jobs)


pytestmark = pytest.mark.timeout(240)
