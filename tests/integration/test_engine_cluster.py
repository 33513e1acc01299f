"""The engine's `Cluster` on the real API server: which jobs it sizes, the capacity it measures,
`/scale` writes (stale counts refused, real write conflicts retried), state and Events."""

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.clients.engine_cluster import KubeCluster
from autoscaler.clients.kube import JOBS, Kube, api_client
from autoscaler.engine.ports import Owner
from tests.integration.test_operator import Cluster, elastic_job
from tests.support.controlplane import ControlPlane
from tests.support.polling import wait_for
from tests.support.training import GPU, gpu_node, remove_jobs_and_pods

pytestmark = pytest.mark.integration
JSON = dict[str, Any]


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    kube = Kube(api_client(kubeconfig=str(control_plane.kubeconfig_path)))
    yield kube
    kube.close()


def gpu_job(name: str, *, gpus: str = "2", **policy: Any) -> JSON:
    job = elastic_job(name, replicas=1, low=1, high=4, **policy)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {GPU: gpus}}
    return job


def test_jobs_capacity_scale_state_and_events(
    crd: JSON, kube_api: client.ApiClient, namespace: str, kube: Kube
) -> None:
    users = Cluster(kube_api, namespace)
    users.create(gpu_job("engine-owned"))
    users.create(
        gpu_job(
            "hpa-owned",
            metrics=[
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        )
    )
    opted_out = gpu_job("opted-out")
    opted_out["metadata"]["annotations"] = {c.ANNOTATION_OPT_OUT: "true", c.ANNOTATION_WEIGHT: "3"}
    users.create(opted_out)
    cluster = KubeCluster(kube, namespaces=[namespace])
    try:
        owners = {
            job.name: (job.owner, job.weight, dict(job.resources_per_replica))
            for job in cluster.jobs()
        }
        assert owners == {
            "engine-owned": (Owner.ENGINE, 1.0, {GPU: 2.0}),
            "hpa-owned": (Owner.HPA, 1.0, {GPU: 2.0}),
            "opted-out": (Owner.OPTED_OUT, 3.0, {GPU: 2.0}),
        }
        _check_a_round_reads_memory(cluster, kube=kube)
        _check_capacity(cluster, kube_api=kube_api, namespace=namespace)
        _check_scale(cluster, kube=kube, namespace=namespace)
    finally:
        cluster.close()
        remove_jobs_and_pods(kube_api, namespace)


def _check_a_round_reads_memory(cluster: KubeCluster, *, kube: Kube) -> None:
    """After the informers' first LISTs, reading jobs and capacity sends no request at all."""
    before = kube.requests
    for _ in range(3):
        cluster.jobs()
        cluster.capacity()
    assert kube.requests == before


def _check_capacity(cluster: KubeCluster, *, kube_api: client.ApiClient, namespace: str) -> None:
    """A Node's 8 GPUs, minus what pods outside the engine's jobs request; the engine's own
    workers do not count against it (they are what it hands out). Other pods of the session (the
    operator may be running the HPA-owned and opted-out jobs) count too, so the checks are
    differences."""
    core = client.CoreV1Api(kube_api)
    cluster.jobs()  # which jobs are the engine's

    def capacity_becomes(expected: float) -> None:  # the caches follow the watch
        wait_for(lambda: cluster.capacity().get(GPU) == expected, what=f"{expected} GPUs free")

    with gpu_node(kube_api, gpus=8):
        wait_for(lambda: GPU in cluster.capacity(), what="the GPU node in the engine's cache")
        base = cluster.capacity()[GPU]
        assert 0 <= base <= 8
        notebook = gpu_pod("notebook", labels={})
        # valid Kubernetes quantities this project once failed to read, failing every round
        notebook["spec"]["containers"][0]["resources"]["requests"] = {
            "cpu": "250u",
            "memory": "5e8",
        }
        core.create_namespaced_pod(namespace, notebook)
        capacity_becomes(max(0.0, base - 2))
        worker = {c.LABEL_JOB_NAME: "engine-owned", c.LABEL_REPLICA_TYPE: c.WORKER.lower()}
        core.create_namespaced_pod(namespace, gpu_pod("engine-owned-worker-9", labels=worker))
        wait_for(
            lambda: "engine-owned-worker-9" in pod_names(cluster), what="the worker in the cache"
        )
        assert cluster.capacity()[GPU] == max(0.0, base - 2)  # the engine's own: not counted
        core.delete_namespaced_pod("notebook", namespace, grace_period_seconds=0)
        capacity_becomes(base)


def pod_names(cluster: KubeCluster) -> set[str]:
    return {pod["metadata"]["name"] for pod in cluster._pods.items()}


def gpu_pod(name: str, *, labels: dict[str, str]) -> JSON:
    resources = {"limits": {GPU: "2"}}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


def _check_scale(cluster: KubeCluster, *, kube: Kube, namespace: str) -> None:
    [job] = [job for job in cluster.jobs() if job.name == "engine-owned"]
    written = cluster.scale(job, replicas=3)
    assert (written.written, written.replicas, written.error) == (True, 3, "")
    stale = cluster.scale(job, replicas=2)  # decided from 1, but the job has 3 now
    assert (stale.written, stale.replicas) == (False, 3)
    assert "changed to 3" in stale.error
    wait_for(lambda: engine_owned(cluster).replicas == 3, what="the write in the engine's cache")
    job = engine_owned(cluster)
    puts = _conflict_on_first_put(kube, namespace=namespace)
    retried = cluster.scale(job, replicas=4)
    assert (retried.written, retried.replicas) == (True, 4)
    assert puts == ["conflict", "written"]  # the real API server refused the stale write once
    cluster.save_state(job, state='{"rescales": 2}')
    annotations = kube.get(JOBS, namespace, "engine-owned")["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_STATE] == '{"rescales": 2}'
    cluster.event(job, reason="Rescaled", message="3 -> 4 workers")
    wait_for(lambda: "Rescaled" in engine_events(kube, namespace), what="the engine's Event")


def engine_owned(cluster: KubeCluster) -> Any:
    [job] = [job for job in cluster.jobs() if job.name == "engine-owned"]
    return job


def _conflict_on_first_put(kube: Kube, *, namespace: str) -> list[str]:
    """Make the API server answer the next /scale PUT with 409: someone else writes the job
    between the engine's read and its write."""
    outcomes: list[str] = []
    send = kube.request

    def request(method: str, path: str, **options: Any) -> JSON:
        if method == "PUT" and path.endswith("/scale") and not outcomes:
            patch = {"metadata": {"annotations": {"touched": "by someone else"}}}
            kube.merge_patch(JOBS, namespace, "engine-owned", patch)
            try:
                return send(method, path, **options)
            except Exception:
                outcomes.append("conflict")
                raise
        result = send(method, path, **options)
        if method == "PUT":
            outcomes.append("written")
        return result

    kube.request = request  # type: ignore[method-assign]
    return outcomes


def engine_events(kube: Kube, namespace: str) -> list[str]:
    events = kube.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [
        event["reason"] for event in events if event["involvedObject"]["name"] == "engine-owned"
    ]
