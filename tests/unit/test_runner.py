"""The runner's handling of what the planner cannot read, with a recording fake client."""

from typing import Any

from autoscaler.controller.runner import Operator

JSON = dict[str, Any]


class RecordingKube:
    """Stands in for `clients.kube.Kube` in a pure unit test: records writes, never connects."""

    requests = writes = 0

    def __init__(self) -> None:
        self.created: list[JSON] = []

    def create(self, obj: JSON) -> JSON:
        self.created.append(obj)
        return obj


def test_unreadable_job_gets_one_warning_event_per_generation() -> None:
    kube = RecordingKube()
    operator = Operator(kube)  # type: ignore[arg-type]
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "odd", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "many"}}},
    }
    operator.jobs.apply("ADDED", job)
    assert operator.reconcile(("ns", "odd")) is None
    assert operator.reconcile(("ns", "odd")) is None
    operator.events.close()  # events are sent off the reconcile path: flush them
    events = [(e["reason"], e["message"]) for e in kube.created]
    assert events == [
        (
            "InvalidSpec",
            "spec.pytorchReplicaSpecs.Worker.replicas: Input should be a valid integer, unable to parse string as an integer",
        )
    ]
