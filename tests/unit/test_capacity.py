"""The engine's free capacity from cached Nodes and pods, and what it does with a pod whose
requests cannot be read: left out with a Warning Event (once per version), never a failed round."""

from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.clients.capacity import free_capacity
from autoscaler.clients.engine_cluster import KubeCluster

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"


def node(gpus: str, *, ready: str = "True", unschedulable: bool = False) -> JSON:
    return {
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": {GPU: gpus, "cpu": "8"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(name: str, requests: JSON, *, version: str = "1") -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": version,
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
    }


@pytest.mark.parametrize(
    ("nodes", "pods", "free", "skipped"),
    [
        ([node("8")], [], {GPU: 8.0, "cpu": 8.0}, []),
        ([node("8"), node("8", ready="False")], [], {GPU: 8.0, "cpu": 8.0}, []),
        ([node("8"), node("8", unschedulable=True)], [], {GPU: 8.0, "cpu": 8.0}, []),
        ([node("8")], [pod("a", {GPU: "3", "cpu": "250u"})], {GPU: 5.0, "cpu": 8.0 - 250e-6}, []),
        ([node("2")], [pod("a", {GPU: "3"})], {GPU: 0.0, "cpu": 8.0}, []),  # never below zero
        (
            [node("8")],
            [pod("bad", {GPU: "two"}), pod("good", {GPU: "1"})],
            {GPU: 7.0, "cpu": 8.0},
            ["bad"],
        ),
    ],
    ids=["one node", "not ready", "cordoned", "requests", "overcommitted", "unreadable pod"],
)
def test_free_capacity(
    nodes: list[JSON], pods: list[JSON], free: dict[str, float], skipped: list[str]
) -> None:
    got, left_out = free_capacity(nodes, pods)
    assert got == pytest.approx(free)
    assert [p["metadata"]["name"] for p, _ in left_out] == skipped
    assert all("two" in error for _, error in left_out)


class Recorder:
    def __init__(self) -> None:
        self.events: list[JSON] = []

    def record(self, event: JSON) -> None:
        self.events.append(event)


def test_an_unreadable_pod_gets_one_warning_per_version() -> None:
    recorder = Recorder()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cluster = KubeCluster(None, recorder=recorder, clock=lambda: now)  # type: ignore[arg-type]
    bad = pod("bad", {GPU: "two"})
    for _ in range(3):  # every round skips it; one Event
        cluster._warn_skipped([(bad, "quantity 'two'")])
    cluster._warn_skipped([(pod("bad", {GPU: "three"}, version="2"), "quantity 'three'")])
    assert [
        (e["type"], e["reason"], e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for e in recorder.events
    ] == [("Warning", "UnreadableRequests", "Pod", "bad")] * 2
    assert "quantity 'three'" in recorder.events[1]["message"]


def test_an_unreadable_job_gets_a_warning_and_is_not_sized() -> None:
    recorder = Recorder()
    cluster = KubeCluster(None, recorder=recorder)  # type: ignore[arg-type]
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": {"elasticPolicy": {}}}
    job["spec"]["pytorchReplicaSpecs"] = {"Worker": {"replicas": "three"}}
    assert cluster._typed_job(job) is None
    assert [(e["reason"], e["involvedObject"]["name"]) for e in recorder.events] == [
        ("UnreadableJob", "j")
    ]
