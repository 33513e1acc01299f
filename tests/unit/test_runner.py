"""The runner's handling of what the planner cannot read, of writes that fail and of writes the
caches never show, with recording fake clients and a monotonic clock the test moves."""

import contextlib
import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from autoscaler.clients.informer import Informer
from autoscaler.clients.kube import (
    ConflictError,
    NamespaceTerminatingError,
    NotFoundError,
    _translate,
)
from autoscaler.controller.adoption import AdoptionError
from autoscaler.controller.expectations import EXPECTATION_TIMEOUT
from autoscaler.controller.gang import PODGROUP_KIND
from autoscaler.controller.reconcile_pass import Observed, Plan
from autoscaler.controller.runner import Operator, OperatorConfig
from autoscaler.observability.metrics import CONTROLLER, UPSTREAM_OBJECT_COUNTERS
from tests.support.jobs import echo_with, spec

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


# -- upstream's object counters ------------------------------------------------------------------


class ScriptedKube(RecordingKube):
    """Writes succeed, except creates of a kind in `refuse` (raising that kind's error) and
    deletes of a name in `gone` (404); jobs read back as last written."""

    def __init__(
        self, refuse: dict[str, Exception] | None = None, gone: frozenset[str] = frozenset()
    ) -> None:
        super().__init__()
        self.refuse, self.gone = refuse or {}, gone
        self.jobs: dict[str, JSON] = {}

    def create(self, obj: JSON, *, resource: object = None) -> JSON:
        if obj["kind"] in self.refuse:
            raise self.refuse[obj["kind"]]
        return super().create(obj)

    def replace(self, obj: JSON, **_: object) -> JSON:
        if obj["kind"] == "PyTorchJob":
            self.jobs[obj["metadata"]["name"]] = obj
        return obj

    def get(self, resource: object, namespace: str, name: str) -> JSON:
        return self.jobs[name]

    def delete(self, resource: object, namespace: str, name: str) -> None:
        if name in self.gone:
            raise NotFoundError(name)


def counters(operator: Operator) -> dict[str, float]:
    """The upstream object counters that moved."""
    values = {
        name: operator.metrics.registry.get_sample_value(f"{name}_total") or 0.0
        for name in UPSTREAM_OBJECT_COUNTERS
    }
    return {name: value for name, value in values.items() if value}


def gang_operator(kube: RecordingKube) -> Operator:
    """An operator with gang scheduling whose PodGroup cache exists (as once the CRD is served)."""
    operator = Operator(kube, config=OperatorConfig(gang_scheduler_name="volcano"))  # type: ignore[arg-type]
    operator._caches[PODGROUP_KIND] = Informer(
        kube,  # type: ignore[arg-type]
        operator.served.podgroup_resource,
        on_event=lambda *_: None,
    )
    return operator


def owned(kind: str, name: str = "x", uid: str = "u") -> JSON:
    ref = {"kind": "PyTorchJob", "name": "echo", "uid": uid, "controller": True}
    labels = {"training.kubeflow.org/job-name": "echo"}
    metadata = {"name": name, "namespace": "ns", "labels": labels, "ownerReferences": [ref]}
    return {"kind": kind, "metadata": metadata}


REFUSED = ApiException(status=422, reason="Unprocessable")


@pytest.mark.parametrize(
    ("writes", "kube", "moved"),
    [
        (Plan(create=[owned("Pod")]), ScriptedKube(), {"created_pods": 1}),
        (Plan(create=[owned("Pod")]), ScriptedKube({"Pod": REFUSED}), {}),
        (Plan(create=[owned("Service")]), ScriptedKube(), {"succeeded_service_creation": 1}),
        (
            Plan(create=[owned("Service")]),
            ScriptedKube({"Service": REFUSED}),
            {"failed_service_creation": 1},
        ),
        (
            Plan(create=[owned("Service")]),
            ScriptedKube({"Service": NamespaceTerminatingError("ns is being terminated")}),
            {"failed_service_creation": 1},
        ),
        # already there (a stale cache): upstream's expectations avoid it; no create happened
        (Plan(create=[owned("Service")]), ScriptedKube({"Service": ConflictError("exists")}), {}),
        (Plan(create=[owned("PodGroup")]), ScriptedKube(), {"created_pod_groups": 1}),
        (Plan(create=[owned("HorizontalPodAutoscaler")]), ScriptedKube(), {}),
        (Plan(delete=[("PodGroup", "x")]), ScriptedKube(), {"deleted_pod_groups": 1}),
        (Plan(delete=[("PodGroup", "x")]), ScriptedKube(gone=frozenset({"x"})), {}),
        (Plan(delete=[("Pod", "x")]), ScriptedKube(), {}),  # counted when the watch shows it
        (Plan(failed_pods=["p1", "p2"]), ScriptedKube(), {"failed_pods": 2}),
    ],
    ids=[
        "pod created",
        "pod refused",
        "service created",
        "service refused",
        "service in a terminating namespace",
        "service already there",
        "podgroup created",
        "hpa created",
        "podgroup deleted",
        "podgroup already gone",
        "pod deleted",
        "failed pods",
    ],
)
def test_upstream_object_counters_count_the_writes(
    writes: Plan, kube: ScriptedKube, moved: dict[str, float]
) -> None:
    operator = gang_operator(kube)
    with contextlib.suppress(Exception):  # a refused write is raised after the others
        operator.apply(owned("PyTorchJob", "echo"), writes, observed=Observed())
    operator.events.close()
    assert counters(operator) == moved


def test_a_failed_pod_is_counted_once_however_many_passes_see_it() -> None:
    """With a kubelet, a deleted pod stays (terminating, still Failed) through its grace period,
    and every pass meanwhile sees it: upstream counts it on each, here once."""
    kube = ScriptedKube()
    operator = Operator(kube)  # type: ignore[arg-type]
    job = echo_with(lambda job: job["metadata"].update(namespace="ns", uid="u"))
    name = job["metadata"]["name"]
    kube.jobs[name] = job
    operator.jobs.apply("ADDED", job)
    operator.reconcile(("ns", name))  # creates the pods
    for created in [obj for obj in kube.created if obj["kind"] == "Pod"]:
        pod = copy.deepcopy(created)
        pod["metadata"]["uid"] = pod["metadata"]["name"]
        pod["metadata"]["ownerReferences"][0]["uid"] = "u"
        pod["status"] = {"phase": "Failed" if pod["metadata"]["name"].endswith("-1") else "Running"}
        operator.pods.apply("MODIFIED", pod)
    failed = operator.pods.get(("ns", f"{name}-worker-1"))
    assert failed is not None
    operator.reconcile(("ns", name))  # OnFailure: deletes the failed pod to restart it
    failed["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    operator.pods.apply("MODIFIED", failed)
    operator.reconcile(("ns", name))
    operator.events.close()
    assert counters(operator)["failed_pods"] == 1


@pytest.mark.parametrize(
    ("job_known", "owner_uid", "counted"),
    [(True, "u", 1), (False, "u", 0), (True, "another job's", 0)],
    ids=["its job's pod", "job unknown", "owned by a job of the same name gone since"],
)
def test_a_pod_deletion_the_watch_shows_is_counted_for_known_jobs(
    job_known: bool, owner_uid: str, counted: float
) -> None:
    """Upstream counts `deleted_pods_total` in its pod informer's delete handler, for pods of a
    job it knows (whoever deleted them)."""
    operator = Operator(ScriptedKube())  # type: ignore[arg-type]
    if job_known:
        operator.jobs.apply(
            "ADDED",
            echo_with(lambda job: job["metadata"].update(namespace="ns", name="echo", uid="u")),
        )
    pod = owned("Pod", "echo-worker-0", uid=owner_uid)
    operator.pods.apply("ADDED", copy.deepcopy(pod))
    operator.pods.apply("DELETED", pod)
    assert counters(operator).get("deleted_pods", 0) == counted


def test_podgroup_events_use_upstreams_wording() -> None:
    kube = ScriptedKube()
    operator = gang_operator(kube)
    writes = Plan(create=[owned("PodGroup", "echo")], delete=[("PodGroup", "echo")])
    operator.apply(owned("PyTorchJob", "echo"), writes, observed=Observed())
    operator.events.close()
    events = [(e["reason"], e["message"]) for e in kube.created if e["kind"] == "Event"]
    assert events == [
        ("SuccessfulCreatePodGroup", "Created PodGroup: echo"),  # not upstream's: it sends none
        ("SuccessfulDeletePodGroup", "Deleted PodGroup: echo"),  # upstream's job.go wording
    ]


def runtime_sample(operator: Operator, name: str, **labels: str) -> float | None:
    return operator.metrics.registry.get_sample_value(name, {"controller": CONTROLLER, **labels})


def started_with_deadline(job: JSON) -> None:
    spec(job)["runPolicy"] = {"activeDeadlineSeconds": 600}
    job["status"] = {"startTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


@pytest.mark.parametrize(
    ("kube", "edit", "result"),
    [
        (AcceptingKube(), lambda job: None, "success"),
        (AcceptingKube(), started_with_deadline, "requeue_after"),
        (UnreachableKube(), lambda job: None, "error"),
    ],
    ids=["success", "deadline ahead", "write failed"],
)
def test_a_pass_is_counted_under_controller_runtimes_names(
    kube: RecordingKube, edit: Any, result: str
) -> None:
    operator = Operator(kube)  # type: ignore[arg-type]
    job = echo_with(lambda job: (job["metadata"].update(namespace="ns", uid="u"), edit(job)))
    operator.jobs.apply("ADDED", job)
    operator.queue.add(("ns", job["metadata"]["name"]))
    operator.process(operator.queue.get(timeout=0))  # type: ignore[arg-type]
    operator.events.close()
    name = "controller_runtime_reconcile_total"
    assert runtime_sample(operator, name, result=result) == 1.0
    others = {"success", "error", "requeue", "requeue_after"} - {result}
    assert [r for r in others if runtime_sample(operator, name, result=r)] == []
    errors = runtime_sample(operator, "controller_runtime_reconcile_errors_total")
    assert errors == (1.0 if result == "error" else 0.0)
    assert runtime_sample(operator, "controller_runtime_reconcile_time_seconds_count") == 1.0
    assert runtime_sample(operator, "controller_runtime_active_workers") == 0.0
    retries = operator.metrics.registry.get_sample_value(
        "workqueue_retries_total", {"name": CONTROLLER, "controller": CONTROLLER}
    )
    assert retries == (1.0 if result == "error" else 0.0)


class PatchingKube(AcceptingKube):
    """Accepts writes; strategic merge patches are recorded and applied to the object as the API
    server would for these two patches, or raise `refuse`; the job reads back as `fresh`."""

    def __init__(self, fresh: JSON | None, refuse: Exception | None = None) -> None:
        super().__init__()
        self.fresh, self.refuse = fresh, refuse
        self.patches: list[tuple[str, JSON]] = []
        self.objects: dict[str, JSON] = {}

    def get(self, resource: object, namespace: str, name: str) -> JSON:
        if self.fresh is None:
            raise NotFoundError(name)
        return self.fresh

    def merge_patch(
        self, resource: object, namespace: str, name: str, patch: JSON, *, strategic: bool
    ) -> JSON:
        assert strategic
        self.patches.append((name, patch))
        if self.refuse is not None:
            raise self.refuse
        obj = copy.deepcopy(self.objects[name])
        refs = [r for r in patch["metadata"]["ownerReferences"] if "$patch" not in r]
        obj["metadata"]["ownerReferences"] = refs
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        return obj


def orphan_of(job: JSON, name: str, **labels: str) -> JSON:
    metadata = {
        "name": name,
        "namespace": "ns",
        "uid": f"{name}-uid",
        "resourceVersion": "1",
        "labels": {
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/job-name": job["metadata"]["name"],
            **labels,
        },
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {}, "status": {}}


def claiming(kube: PatchingKube, *orphans: JSON) -> tuple[Operator, JSON]:
    operator = Operator(kube)  # type: ignore[arg-type]
    job = echo_with(lambda job: job["metadata"].update(namespace="ns", uid="u"))
    kube.fresh = job if kube.fresh is not None else None
    operator.jobs.apply("ADDED", job)
    for orphan in orphans:
        kube.objects[orphan["metadata"]["name"]] = orphan
        operator.pods.apply("ADDED", copy.deepcopy(orphan))
    return operator, job


def test_an_orphan_is_adopted_and_not_created_again() -> None:
    kube = PatchingKube(fresh={})
    worker = "elastic-example-echo-worker-0"
    labels = {
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
    }
    operator, job = claiming(kube, orphan_of(echo_with(lambda j: None), worker, **labels))
    operator.reconcile(("ns", job["metadata"]["name"]))
    operator.events.close()
    [(name, patch)] = kube.patches
    assert name == worker
    assert patch["metadata"]["uid"] == f"{worker}-uid"
    [ref] = patch["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
        "PyTorchJob",
        "u",
        True,
        True,
    )
    created = [o["metadata"]["name"] for o in kube.created if o["kind"] == "Pod"]
    assert created == ["elastic-example-echo-worker-1"]  # worker-0 is the adopted one


def test_no_adoption_when_the_fresh_read_finds_the_job_gone() -> None:
    kube = PatchingKube(fresh=None)
    operator, job = claiming(kube, orphan_of(echo_with(lambda j: None), "stray"))
    with pytest.raises(AdoptionError, match="ns/elastic-example-echo is gone"):
        operator.reconcile(("ns", job["metadata"]["name"]))
    assert kube.patches == []


def test_a_release_the_api_server_finds_invalid_is_no_failure() -> None:
    kube = PatchingKube(fresh={}, refuse=ApiException(status=422, reason="Invalid"))
    operator, job = claiming(kube)
    relabelled = orphan_of(job, "moved", **{"training.kubeflow.org/job-name": "other"})
    relabelled["metadata"]["ownerReferences"] = [
        {"kind": "PyTorchJob", "uid": "u", "controller": True}
    ]
    kube.objects["moved"] = relabelled
    operator.pods.apply("ADDED", relabelled)
    operator.reconcile(("ns", job["metadata"]["name"]))
    assert [name for name, _ in kube.patches] == ["moved"]
    assert kube.patches[0][1]["metadata"]["ownerReferences"] == [{"$patch": "delete", "uid": "u"}]
