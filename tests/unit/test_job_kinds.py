"""A kind of job plugs into the engine's Kubernetes adapter through its `JobKind`: the adapter's
reads and writes for a job (its resource, its typed view, its worker pods, its `scale` path, its
suspend and resume patch, its Events) come from its kind. PyTorchJob is the product's only kind;
ElasticThing is made up here, with a spec laid out its own way."""

import copy
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from autoscaler.api import coordinates as c
from autoscaler.api.ownership import Owner
from autoscaler.api.timestamps import parse_timestamp
from autoscaler.clients.engine_cluster import KubeCluster, scale_body
from autoscaler.clients.job_kinds import PYTORCHJOB, JobKind
from autoscaler.clients.kube import JOBS, Resource
from autoscaler.engine.ports import JobKey, ManagedJob
from tests.support.clock import NOW
from tests.support.engine_jobs import managed_job

JSON = dict[str, Any]
THINGS = Resource("example.com", "v1", "elasticthings")
THING_LABEL = "example.com/thing"  # its own operator's label on its worker pods


def read_thing(obj: Mapping[str, Any]) -> ManagedJob | None:
    """`spec.workers` between `spec.minWorkers` and `spec.maxWorkers`, paused by `spec.paused`."""
    spec, metadata = obj.get("spec") or {}, obj["metadata"]
    if "workers" not in spec:
        return None
    return ManagedJob(
        namespace=metadata["namespace"],
        name=metadata["name"],
        uid=metadata.get("uid", ""),
        resource_version=metadata.get("resourceVersion", ""),
        min_replicas=int(spec["minWorkers"]),
        max_replicas=int(spec["maxWorkers"]),
        replicas=int(spec["workers"]),
        active=int((obj.get("status") or {}).get("readyWorkers") or 0),
        owner=Owner.ENGINE,
        created=parse_timestamp(metadata["creationTimestamp"]),
        suspended=bool(spec.get("paused")),
    )


def thing_worker(pod: Mapping[str, Any]) -> JobKey | None:
    metadata = pod.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(THING_LABEL)
    return None if name is None else (metadata.get("namespace", ""), name)


def thing_queueing_spec(*, suspend: bool, replicas: int | None) -> JSON:
    spec: JSON = {"paused": suspend}
    if replicas is not None:
        spec["workers"] = replicas
    return spec


ELASTIC_THING = JobKind(
    kind="ElasticThing",
    resource=THINGS,
    managed_job=read_thing,
    worker_of=thing_worker,
    queueing_spec=thing_queueing_spec,
)


def pytorchjob(name: str) -> JSON:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": _metadata(name),
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 4},
            "pytorchReplicaSpecs": {c.WORKER: {"replicas": 2, "template": {}}},
        },
        "status": {"replicaStatuses": {c.WORKER: {"active": 2}}},
    }


def thing(name: str) -> JSON:
    return {
        "apiVersion": "example.com/v1",
        "kind": "ElasticThing",
        "metadata": _metadata(name),
        "spec": {"workers": 3, "minWorkers": 1, "maxWorkers": 6},
        "status": {"readyWorkers": 2},
    }


def _metadata(name: str) -> JSON:
    return {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "creationTimestamp": "2026-11-29T11:00:00Z",
    }


def pod(name: str, labels: Mapping[str, str], *, cpu: str, ready: str = "True") -> JSON:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": dict(labels)},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
    }


NODE = {
    "metadata": {"name": "n1"},
    "spec": {},
    "status": {"allocatable": {"cpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
}


class MemoryKube:
    """A cluster answering from memory: lists by plural, watches that stay quiet until `done`,
    and each write recorded as (method, path, body)."""

    def __init__(self, objects: Mapping[str, list[JSON]] | None = None) -> None:
        self.objects = dict(objects or {})
        self.listed: list[str] = []
        self.sent: list[tuple[str, str, Any]] = []
        self.done = threading.Event()

    def list(self, resource: Resource, *, namespace: str | None = None, selector: str = "") -> JSON:
        self.listed.append(resource.path(namespace))
        items = copy.deepcopy(self.objects.get(resource.plural, []))
        return {"metadata": {"resourceVersion": "1"}, "items": items}

    def watch(self, resource: Resource, **_: Any) -> Iterator[JSON]:
        self.done.wait(10)
        return iter([])

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> JSON:
        self.sent.append((method, path, body))
        return {"spec": {"replicas": body["spec"]["replicas"]}}

    def merge_patch(self, resource: Resource, namespace: str, name: str, patch: JSON) -> JSON:
        self.sent.append(("PATCH", resource.path(namespace, name), patch))
        return next(
            o for o in self.objects.get(resource.plural, []) if o["metadata"]["name"] == name
        )


class Recorder:
    def __init__(self) -> None:
        self.events: list[JSON] = []

    def record(self, event: JSON) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


MARKER = {c.ANNOTATION_HELD_SINCE: "2026-11-29T12:00:00Z"}


@pytest.mark.parametrize(
    ("kind", "api_version", "scale_path", "suspend_spec", "resume_spec"),
    [
        (PYTORCHJOB, "kubeflow.org/v1", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j/scale",
         {"runPolicy": {"suspend": True}},
         {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}),
        (ELASTIC_THING, "example.com/v1",
         "/apis/example.com/v1/namespaces/ns/elasticthings/j/scale",
         {"paused": True}, {"paused": False, "workers": 3}),
    ],
)  # fmt: skip
def test_a_jobs_scale_path_and_its_suspend_and_resume_patches_come_from_its_kind(
    kind: JobKind, api_version: str, scale_path: str, suspend_spec: JSON, resume_spec: JSON
) -> None:
    kube = MemoryKube({kind.resource.plural: [{"metadata": {"name": "j"}}]})
    cluster = KubeCluster(kube, kinds=[kind], recorder=Recorder())  # type: ignore[arg-type]
    job = managed_job(resource_version="7")
    assert kind.api_version == api_version
    assert cluster.scale(job, replicas=5).written
    assert cluster.suspend(job, since=NOW).written
    assert cluster.resume(job, replicas=3).written
    job_path = scale_path.removesuffix("/scale")
    version = {"resourceVersion": "7"}
    assert kube.sent == [
        ("PUT", scale_path, scale_body(job, replicas=5)),
        ("PATCH", job_path, {"metadata": {**version, "annotations": MARKER}, "spec": suspend_spec}),
        ("PATCH", job_path,
         {"metadata": {**version, "annotations": {c.ANNOTATION_HELD_SINCE: None}},
          "spec": resume_spec}),
    ]  # fmt: skip


def test_pytorchjob_is_the_kind_a_cluster_sizes_unless_told_otherwise() -> None:
    assert KubeCluster(MemoryKube()).kinds == (PYTORCHJOB,)  # type: ignore[arg-type]
    assert (PYTORCHJOB.kind, PYTORCHJOB.resource, PYTORCHJOB.api_version) == (
        c.KIND,
        JOBS,
        c.API_VERSION,
    )


@pytest.mark.parametrize("kinds", [[], [PYTORCHJOB, PYTORCHJOB]])
def test_a_cluster_sizes_at_least_one_kind_each_named_once(kinds: list[JobKind]) -> None:
    with pytest.raises(ValueError, match="job kinds"):
        KubeCluster(MemoryKube(), kinds=kinds)  # type: ignore[arg-type]


def two_kinds(objects: Mapping[str, list[JSON]]) -> tuple[KubeCluster, MemoryKube, Recorder]:
    kube, recorder = MemoryKube(objects), Recorder()
    cluster = KubeCluster(
        kube,  # type: ignore[arg-type]
        kinds=[PYTORCHJOB, ELASTIC_THING],
        namespaces=["ns"],
        recorder=recorder,  # type: ignore[arg-type]
        clock=lambda: NOW,
    )
    return cluster, kube, recorder


def test_a_second_kind_is_read_sized_and_written_through_its_own_adapter() -> None:
    pytorch_worker = {c.LABEL_REPLICA_TYPE: "worker", c.LABEL_JOB_NAME: "trainer"}
    objects = {
        "pytorchjobs": [pytorchjob("trainer")],
        "elasticthings": [thing("thing")],
        "nodes": [NODE],
        "pods": [
            pod("trainer-worker-0", pytorch_worker, cpu="1"),
            pod("thing-0", {THING_LABEL: "thing"}, cpu="2", ready="False"),
            pod("other", {}, cpu="1"),
        ],
    }
    cluster, kube, recorder = two_kinds(objects)
    try:
        jobs = {job.name: job for job in cluster.jobs()}
        capacity = cluster.capacity()
    finally:
        kube.done.set()
        cluster.close()
    assert sorted(kube.listed) == sorted([
        "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs",
        "/apis/example.com/v1/namespaces/ns/elasticthings",
        "/api/v1/nodes",
        "/api/v1/pods",
    ])  # fmt: skip
    trainer, elastic = jobs["trainer"], jobs["thing"]
    assert (trainer.replicas, trainer.max_replicas, trainer.unready) == (2, 4, 0)
    assert (elastic.replicas, elastic.max_replicas, elastic.active, elastic.unready) == (3, 6, 2, 1)
    assert capacity == {"cpu": 7.0}  # both jobs' workers are the engine's to size: only "other"

    assert cluster.scale(elastic, replicas=4).written
    assert cluster.scale(trainer, replicas=3).written
    assert cluster.suspend(elastic, since=NOW).written
    cluster.event(elastic, reason="Rescaled", message="3 -> 4")
    assert [(method, path) for method, path, _ in kube.sent] == [
        ("PUT", "/apis/example.com/v1/namespaces/ns/elasticthings/thing/scale"),
        ("PUT", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/trainer/scale"),
        ("PATCH", "/apis/example.com/v1/namespaces/ns/elasticthings/thing"),
    ]
    assert kube.sent[-1][2]["spec"] == {"paused": True}
    involved = recorder.events[-1]["involvedObject"]
    assert (involved["apiVersion"], involved["kind"], involved["name"]) == (
        "example.com/v1",
        "ElasticThing",
        "thing",
    )


def test_a_job_named_as_one_of_another_kind_is_left_out_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    objects = {"pytorchjobs": [pytorchjob("a")], "elasticthings": [thing("a")]}
    cluster, kube, _ = two_kinds(objects)
    try:
        with caplog.at_level(logging.WARNING, logger="autoscaler.clients.engine_cluster"):
            rounds = [cluster.jobs() for _ in range(2)]
    finally:
        kube.done.set()
        cluster.close()
    assert [[job.replicas for job in jobs] for jobs in rounds] == [[2], [2]]  # the PyTorchJob
    assert caplog.messages == ["ElasticThing ns/a not sized: a PyTorchJob has its name"]
