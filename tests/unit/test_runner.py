"""The runner's handling of what the planner cannot read, of writes that fail and of writes the
caches never show, with recording fake clients and a monotonic clock the test moves."""

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from autoscaler.clients.kube import ConflictError, NamespaceTerminatingError, _translate
from autoscaler.controller.runner import EXPECTATION_TIMEOUT, Operator
from tests.support.jobs import echo_with

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


class UnreachableKube(RecordingKube):
    """An API server that is down: every create fails as a refused connection would."""

    def create(self, obj: JSON, *, resource: object = None) -> JSON:
        self.created.append(obj)
        raise ConnectionRefusedError("the API server is restarting")

    def replace(self, obj: JSON, **_: object) -> JSON:
        raise ConnectionRefusedError("the API server is restarting")


def test_a_failed_create_is_retried_at_once_not_after_the_expectation_timeout() -> None:
    kube = UnreachableKube()
    operator = Operator(kube)  # type: ignore[arg-type]
    job = echo_with(lambda job: job["metadata"].update(namespace="ns", uid="u"))
    operator.jobs.apply("ADDED", job)
    with pytest.raises(ConnectionRefusedError):
        operator.reconcile(("ns", job["metadata"]["name"]))
    # The next pass plans again: nothing waits for pods that were never created.
    with pytest.raises(ConnectionRefusedError):
        operator.reconcile(("ns", job["metadata"]["name"]))
    operator.events.close()
    pods = [obj["metadata"]["name"] for obj in kube.created if obj["kind"] == "Pod"]
    assert pods == ["elastic-example-echo-worker-0", "elastic-example-echo-worker-1"] * 2


class AcceptingKube(RecordingKube):
    """Accepts every write (the status one too) without connecting."""

    def create(self, obj: JSON, *, resource: object = None) -> JSON:
        return super().create(obj)

    def replace(self, obj: JSON, **_: object) -> JSON:
        return obj


class SteppedClock:
    """A monotonic clock that moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_write_the_caches_never_show_is_waited_for_until_the_expectation_times_out() -> None:
    kube, monotonic = AcceptingKube(), SteppedClock()
    operator = Operator(kube, monotonic=monotonic)  # type: ignore[arg-type]
    job = echo_with(lambda job: job["metadata"].update(namespace="ns", uid="u"))
    key = ("ns", job["metadata"]["name"])
    operator.jobs.apply("ADDED", job)
    assert operator.reconcile(key) is not None
    created = [obj for obj in kube.created if obj["kind"] == "Pod"]
    assert len(created) == 2
    # The watch never shows one of the two pods (as if it were lost between write and watch).
    operator.pods.apply("DELETED", created[1])
    for elapsed in (0.0, EXPECTATION_TIMEOUT / 2, EXPECTATION_TIMEOUT):
        monotonic.now = 1000.0 + elapsed
        assert operator.reconcile(key) is None, f"planned again {elapsed} s after its writes"
    monotonic.now = 1000.0 + EXPECTATION_TIMEOUT + 0.001
    assert operator.reconcile(key) is not None  # given up waiting: planned from the caches
    operator.events.close()
    pods = [obj["metadata"]["name"] for obj in kube.created if obj["kind"] == "Pod"]
    lost = created[1]["metadata"]["name"]
    assert pods == ["elastic-example-echo-worker-0", "elastic-example-echo-worker-1", lost]


class TerminatingNamespaceKube(RecordingKube):
    """The job's namespace is being deleted: the API server refuses every create in it."""

    def create(self, obj: JSON, *, resource: object = None) -> JSON:
        if obj["kind"] == "Event":
            return super().create(obj)
        raise NamespaceTerminatingError("namespace ns is being terminated")

    def replace(self, obj: JSON, **_: object) -> JSON:
        return obj


def test_a_terminating_namespace_is_no_failure_and_no_event() -> None:
    kube = TerminatingNamespaceKube()
    operator = Operator(kube)  # type: ignore[arg-type]
    job = echo_with(lambda job: job["metadata"].update(namespace="ns", uid="u"))
    operator.jobs.apply("ADDED", job)
    operator.reconcile(("ns", job["metadata"]["name"]))  # no error: nothing to retry
    operator.events.close()
    assert not [e["reason"] for e in kube.created if e["reason"].startswith("Failed")]


@pytest.mark.parametrize(
    ("status", "body", "translated"),
    [
        (
            403,
            '{"details": {"causes": [{"reason": "NamespaceTerminating"}]}}',
            NamespaceTerminatingError,
        ),
        (403, '{"reason": "Forbidden"}', ApiException),
        (403, "not json", ApiException),
        (409, "{}", ConflictError),
    ],
    ids=["terminating", "plain 403", "unreadable body", "conflict"],
)
def test_api_errors_are_translated(status: int, body: str, translated: type) -> None:
    error = ApiException(status=status, reason="r")
    error.body = body
    assert type(_translate(error)) is translated
