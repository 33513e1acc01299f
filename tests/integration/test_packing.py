"""The packing affinity on the real kube-scheduler: elastic jobs' workers, one GPU each, bound to
4-GPU Nodes with room to spread. Through the operator each job lands on as few nodes as its GPUs
fill; the same pods built without the affinity are spread by the scheduler's default scoring. A
scale-down removes the workers on a job's least-filled node, whatever their index.

Nodes are API objects only (nothing runs the pods: binding is all that is measured), labelled and
tainted for one case so that no other test's pods land on them and these land nowhere else."""

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import PyTorchJob, default_job
from autoscaler.api import coordinates as c
from autoscaler.controller.builders import desired_pod
from autoscaler.controller.runner import Operator
from tests.integration.test_operator import Cluster, elastic_job
from tests.support.controlplane import ControlPlane
from tests.support.fixtures import summary_line
from tests.support.node_agent import GPU
from tests.support.polling import wait_for

JSON = dict[str, Any]
NODE_GPUS = 4
NODES = 5
JOBS = {"a": 4, "b": 4, "c": 2}  # job -> workers, one GPU each: 10 of 20 GPUs
LABEL = "packing.test/case"
HOSTNAME = "kubernetes.io/hostname"


@contextmanager
def gpu_nodes(api: client.ApiClient, case: str, count: int = NODES) -> Iterator[list[str]]:
    """`count` Ready Nodes of NODE_GPUS GPUs, labelled and tainted with `case`."""
    core = client.CoreV1Api(api)
    names = [f"{case}-node-{i}" for i in range(count)]
    resources = {GPU: str(NODE_GPUS), "cpu": "8", "memory": "32Gi", "pods": "110"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
    taint = {"key": LABEL, "value": case, "effect": "NoSchedule"}
    try:
        for name in names:
            labels = {LABEL: case, HOSTNAME: name}  # the kubelet's hostname label, the topology
            core.create_node({"metadata": {"name": name, "labels": labels}})
            status = {"capacity": resources, "allocatable": resources, "conditions": [ready]}
            core.patch_node_status(name, {"status": status})
            # Replaces the not-ready taint admission adds (no node lifecycle controller lifts it).
            core.patch_node(name, {"spec": {"taints": [taint]}})
        yield names
    finally:
        for name in names:
            try:
                core.delete_node(name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


def gpu_job(name: str, workers: int, case: str) -> JSON:
    """An elastic job of `workers` one-GPU workers, confined to `case`'s Nodes."""
    job = elastic_job(name, replicas=workers, low=1, high=workers)
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "1Gi", GPU: "1"},
        "limits": {GPU: "1"},
    }
    spec["nodeSelector"] = {LABEL: case}
    spec["tolerations"] = [{"key": LABEL, "operator": "Equal", "value": case}]
    return job


def placements(
    core: client.CoreV1Api, namespace: str, jobs: dict[str, int]
) -> dict[str, dict[str, str]]:
    """Job -> the node of each of its workers, once every worker is bound."""

    def bound() -> dict[str, dict[str, str]] | None:
        listing = core.list_namespaced_pod(namespace).items
        nodes: dict[str, dict[str, str]] = {job: {} for job in jobs}
        for pod in core.api_client.sanitize_for_serialization(listing):
            job = pod["metadata"].get("labels", {}).get(c.LABEL_JOB_NAME)
            if job in nodes and pod["spec"].get("nodeName"):
                nodes[job][pod["metadata"]["name"]] = pod["spec"]["nodeName"]
        done = all(len(nodes[job]) == workers for job, workers in jobs.items())
        return nodes if done else None

    found: dict[str, dict[str, str]] = wait_for(bound, what="the scheduler to bind every worker")
    return found


def spread_share(nodes: dict[str, dict[str, str]], jobs: dict[str, int]) -> float:
    """The share of jobs on more nodes than their GPUs fill."""
    needed = {job: math.ceil(workers / NODE_GPUS) for job, workers in jobs.items()}
    spread = [job for job in jobs if len(set(nodes[job].values())) > needed[job]]
    return len(spread) / len(jobs)


def without_affinity(manifest: JSON, namespace: str) -> Callable[[int], JSON]:
    """Worker `index` as the operator's builder makes it, its affinity removed (and its owner:
    no job is stored)."""
    manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    job = default_job(PyTorchJob.model_validate(manifest))

    def build(index: int) -> JSON:
        pod = desired_pod(job, replica_type="Worker", index=index)
        pod["spec"].pop("affinity")
        pod["metadata"].pop("ownerReferences")
        return pod

    return build


def test_elastic_workers_pack_on_the_fewest_nodes_and_spread_without_the_affinity(
    scheduler: ControlPlane,
    kube_api: client.ApiClient,
    namespace: str,
    operator: Operator,
    request: pytest.FixtureRequest,
) -> None:
    core, cluster = client.CoreV1Api(kube_api), Cluster(kube_api, namespace)
    with gpu_nodes(kube_api, f"{namespace}-packed"):
        for job, workers in JOBS.items():
            cluster.create(gpu_job(job, workers, f"{namespace}-packed"))
        packed = placements(core, namespace, JOBS)
        for job in JOBS:
            cluster.jobs.delete_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, job
            )
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    plain = {f"plain-{job}": workers for job, workers in JOBS.items()}
    with gpu_nodes(kube_api, f"{namespace}-plain"):
        for job, workers in plain.items():
            build = without_affinity(gpu_job(job, workers, f"{namespace}-plain"), namespace)
            for index in range(workers):
                core.create_namespaced_pod(namespace, build(index))
        spread = placements(core, namespace, plain)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    shares = (spread_share(packed, JOBS), spread_share(spread, plain))
    line = (
        f"packing: jobs spread over more nodes than needed, {len(JOBS)} elastic jobs "
        f"({', '.join(map(str, JOBS.values()))} one-GPU workers) on {NODES} nodes of "
        f"{NODE_GPUS} GPUs: {shares[0]:.0%} with the affinity, {shares[1]:.0%} without"
    )
    report_spread(request, line, shares, evidence=(packed, spread))


def report_spread(
    request: pytest.FixtureRequest, line: str, shares: tuple[float, float], *, evidence: Any
) -> None:
    """Print `line`; the first placement's spread share within the target and below the
    second's (`evidence`: the placements, shown when not)."""
    print(line)
    summary_line(request.config, line)
    assert shares[0] <= 0.10, evidence[0]
    assert shares[1] > shares[0], evidence[1]


def test_a_scale_down_empties_the_least_filled_node_and_a_scale_up_refills_the_index(
    scheduler: ControlPlane, kube_api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    """Workers 0, 1 and 3 on one node, worker-2 alone on another (the only node open when it was
    created): the scale-down to 3 deletes worker-2 and its service, not worker-3, which leaves
    the job on one node; the scale-up to 4 creates worker-2 again, bound beside the others."""
    core, cluster = client.CoreV1Api(kube_api), Cluster(kube_api, namespace)
    case = f"{namespace}-least"
    with gpu_nodes(kube_api, case, count=2) as (first, second):
        open_only = lambda node: [cordon(core, n, n != node) for n in (first, second)]  # noqa: E731
        job = gpu_job("x", 4, case)
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
        open_only(first)
        cluster.create(job)
        wait_bound(cluster, "x", {0: first, 1: first})
        open_only(second)
        cluster.scale("x", 3)
        wait_bound(cluster, "x", {0: first, 1: first, 2: second})
        cordon(core, first, False)
        cluster.scale("x", 4)
        before = wait_bound(cluster, "x", {0: first, 1: first, 2: second, 3: first})
        cluster.scale("x", 3)
        kept = {"x-worker-0", "x-worker-1", "x-worker-3"}
        wait_for(
            lambda: (
                deleted(cluster, "x", before) == {"x-worker-2"}
                and set(cluster.services("x")) == kept
            ),
            what="the operator to delete worker-2, alone on its node, and its service",
        )
        with suppress(client.ApiException):  # the kubelet's part: the pod's termination ends
            core.delete_namespaced_pod("x-worker-2", namespace, grace_period_seconds=0)
        cluster.scale("x", 4)
        wait_bound(cluster, "x", {0: first, 1: first, 2: first, 3: first})
        assert deleted(cluster, "x", before) == {"x-worker-2"}  # the others kept, never replaced
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)


def cordon(core: client.CoreV1Api, node: str, closed: bool) -> None:
    core.patch_node(node, {"spec": {"unschedulable": closed}})


def wait_bound(cluster: Cluster, job: str, nodes: dict[int, str]) -> dict[str, JSON]:
    """Wait until exactly the job's workers at `nodes`' indices exist, bound to those nodes."""
    expected = {f"{job}-worker-{index}": node for index, node in nodes.items()}

    def bound() -> dict[str, JSON] | None:
        pods = {
            name: pod
            for name, pod in cluster.pods(job).items()
            if not pod["metadata"].get("deletionTimestamp")
        }
        found = {name: pod["spec"].get("nodeName") for name, pod in pods.items()}
        return pods if found == expected else None

    pods: dict[str, JSON] = wait_for(bound, what=f"{job}'s workers bound as {expected}")
    return pods


def deleted(cluster: Cluster, job: str, before: dict[str, JSON]) -> set[str]:
    """Which of `before`'s pods are gone or being deleted (a pod of the same name and another
    uid counts as a replacement: gone)."""
    now = cluster.pods(job)
    return {
        name
        for name, pod in before.items()
        if name not in now
        or now[name]["metadata"]["uid"] != pod["metadata"]["uid"]
        or now[name]["metadata"].get("deletionTimestamp")
    }
