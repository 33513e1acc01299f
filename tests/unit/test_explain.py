"""`explain` from API objects alone (read as the CLI reads them): owner, throughput points,
curve and decisions."""

from datetime import timedelta
from typing import Any

import pytest

from autoscaler.api import coordinates as c
from autoscaler.cli.explain_command import render, workers_of
from autoscaler.clients.jobs import hpa_status, managed_job, object_name
from autoscaler.engine.explain import explain
from autoscaler.engine.state import DecisionRecord, JobState, Point, Step
from autoscaler.policies.throughput_model import ThroughputModel
from tests.support.clock import NOW


def job_object(
    *, metrics: bool = False, state: JobState | None = None, opt_out: bool = False
) -> dict[str, Any]:
    policy: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 6, "maxRestarts": 10}
    if metrics:
        policy["metrics"] = [{"type": "Resource", "resource": {"name": "cpu"}}]
    annotations = {c.ANNOTATION_STATE: state.to_json()} if state else {}
    if opt_out:
        annotations[c.ANNOTATION_OPT_OUT] = "true"
    template = {
        "spec": {
            "containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        }
    }
    return {
        "metadata": {
            "namespace": "ns",
            "name": "j",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "annotations": annotations,
        },
        "spec": {
            "elasticPolicy": policy,
            "pytorchReplicaSpecs": {"Worker": {"replicas": 3, "template": template}},
        },
        "status": {"replicaStatuses": {"Worker": {"active": 3}}},
    }


def explained(obj: dict[str, Any], *, hpa: dict[str, Any] | None) -> dict[str, Any]:
    """The report of `autoscaler explain` on these objects, with the default throughput model."""
    return explain(
        managed_job(obj),
        name=object_name(obj),
        hpa=hpa_status(hpa) if hpa is not None else None,
        now=NOW,
        model=ThroughputModel(),
    )


def state() -> JobState:
    points = {
        n: Point(samples_per_second=100.0 * n, observed_at=NOW - timedelta(minutes=n))
        for n in (2, 3)
    }
    step = Step(name="policy", replicas=4, reason="OptimalAllocation", message="4 workers")
    held = Step(name="stabilise", replicas=3, reason="ScaleDownStabilized", message="window")
    record = DecisionRecord(
        time=NOW, policy="global-optimizer", proposed=4, replicas=3, reason="ScaleDownStabilized",
        message="window", steps=[step, held], objective=3.5,
    )  # fmt: skip
    return JobState(
        replicas=3,
        throughput=points,
        rescales=3,
        restarts_spent=2,
        last_rescale=NOW,
        decisions=[record],
    )


def test_engine_owned_job_shows_points_curve_and_every_step() -> None:
    report = explained(job_object(state=state()), hpa=None)
    assert report["owner"] == "engine"
    assert report["restarts"] == {"rescales": 3, "max_restarts": 10, "remaining": 8}
    assert [p["replicas"] for p in report["throughput"]] == [2, 3]
    sources = {row["replicas"]: row["source"] for row in report["curve"]}
    assert sources == {
        1: "fitted",
        2: "observed",
        3: "observed",
        4: "fitted",
        5: "unexplored",
        6: "unexplored",
    }
    assert [s["reason"] for s in report["decisions"][0]["steps"]] == [
        "OptimalAllocation",
        "ScaleDownStabilized",
    ]
    text = render(report)
    assert "Owner:     engine" in text
    assert "stabilise     3  ScaleDownStabilized: window" in text
    assert "restart budget left: 8" in text


def test_hpa_owned_job_names_its_hpa_and_conditions() -> None:
    hpa = {
        "metadata": {"name": "j"},
        "status": {
            "desiredReplicas": 4,
            "conditions": [
                {
                    "type": "ScalingLimited",
                    "status": "True",
                    "reason": "TooManyReplicas",
                    "message": "m",
                }
            ],
        },
    }
    report = explained(job_object(metrics=True), hpa=hpa)
    assert report["owner"] == "hpa"
    assert "never writes it" in report["owner_explained"]
    assert report["hpa"]["conditions"] == ["ScalingLimited=True TooManyReplicas: m"]
    assert "none yet" in render(report)


def test_opted_out_and_non_elastic_jobs() -> None:
    assert explained(job_object(opt_out=True), hpa=None)["owner"] == "opted-out"
    plain = job_object()
    del plain["spec"]["elasticPolicy"]
    report = explained(plain, hpa=None)
    assert report["elastic"] is False
    assert "not elastic" in render(report)


def test_the_work_declared_done_and_attained_and_ignored_annotations() -> None:
    obj = job_object(state=state().model_copy(update={"samples_done": 2.5e5,
                                                      "attained_seconds": 3600.0}))  # fmt: skip
    obj["metadata"]["annotations"] |= {
        c.ANNOTATION_TOTAL_SAMPLES: "1e6",
        c.ANNOTATION_ALLOWED_REPLICAS: "2,x",
    }
    report = explained(obj, hpa=None)
    assert report["work"]["total_samples"] == 1e6
    assert report["work"]["allowed_replicas"] is None
    text = render(report)
    assert (
        "Work:      2.5e+05 samples done (of 1e+06 declared), 3600 worker-seconds attained" in text
    )
    assert "Ignored:   elastic-autoscaler.io/allowed-replicas '2,x' is neither" in text


def test_kueue_owned_job_names_its_queue_and_reason() -> None:
    queued = job_object()
    queued["metadata"]["labels"] = {c.LABEL_KUEUE_QUEUE_NAME: "team-a"}
    report = explained(queued, hpa=None)
    assert (report["owner"], report["owner_reason"], report["queue"]) == (
        "kueue",
        "ManagedByKueue",
        "team-a",
    )
    text = render(report)
    assert "Owner:     kueue (ManagedByKueue: Kueue admits it" in text
    assert "Queue:     team-a (Kueue LocalQueue)" in text


def test_a_held_back_job_shows_since_when_and_who_suspended_it() -> None:
    obj = job_object(state=JobState(suspensions=2, forced_resume=NOW - timedelta(hours=2)))
    obj["metadata"]["annotations"] |= {
        c.ANNOTATION_PREEMPTIBLE: "true",
        c.ANNOTATION_HELD_SINCE: "2026-11-29T11:50:00Z",
    }
    obj["spec"]["runPolicy"] = {"suspend": True}
    report = explained(obj, hpa=None)
    assert report["queueing"] == {
        "preemptible": True,
        "suspended_by": "engine",
        "held_since": "2026-11-29T11:50:00+00:00",
        "suspensions": 2,
        "forced_resume": "2026-11-29T10:00:00+00:00",
    }
    assert (
        "Queueing:  preemptible; held back by the engine since 2026-11-29T11:50:00+00:00;"
        " held back 2 times, resumed by the starvation bound at 2026-11-29T10:00:00+00:00"
    ) in render(report)
    del obj["metadata"]["annotations"][c.ANNOTATION_HELD_SINCE]
    assert "suspended by its user (never resumed by the engine)" in render(explained(obj, hpa=None))
    plain = render(explained(job_object(state=state()), hpa=None))
    assert "Queueing:" not in plain  # neither preemptible nor suspended


def test_a_recovering_job_says_why_and_since_when() -> None:
    why = "1 worker pod placed on a node is not ready"
    report = explained(job_object(state=JobState(disturbance=why, disturbed_at=NOW)), hpa=None)
    assert report["recovery"] == {"disturbance": why, "disturbed_at": "2026-11-29T12:00:00+00:00"}
    assert f"Recovery:  recovering: {why} (last seen recovering at 2026-11-29T12:00:00+00:00)" in (
        render(report)
    )
    whole = explained(job_object(state=JobState(disturbed_at=NOW)), hpa=None)
    assert "Recovery:  whole again (last seen recovering at" in render(whole)
    assert "Recovery:" not in render(explained(job_object(state=JobState()), hpa=None))


@pytest.mark.parametrize(
    ("workers", "line"),
    [
        (
            {"nodes": {"a": 3}, "waiting_for_room": 1, "unbound": 0},
            "Placement: a 3; 1 waiting for room to pack (the planned placement)",
        ),
        ({"nodes": {"a": 2, "b": 1}, "waiting_for_room": 0, "unbound": 0}, "Placement: a 2, b 1"),
        ({"nodes": {}, "waiting_for_room": 0, "unbound": 0}, "Placement: no worker pods"),
        (
            {"nodes": {}, "waiting_for_room": 0, "unbound": 2},
            "Placement: 2 not bound yet",
        ),
    ],
)
def test_explain_shows_where_the_workers_are(workers: dict[str, Any], line: str) -> None:
    obj = job_object(state=state())
    report = explain(
        managed_job(obj), name=object_name(obj), hpa=None, now=NOW, model=ThroughputModel(),
        workers=workers,
    )  # fmt: skip
    assert report["workers"] == workers
    lines = render(report).splitlines()
    after = next(i for i, text in enumerate(lines) if text.startswith("Workers:")) + 1
    assert lines[after] == line


def test_explain_without_the_pods_read_has_no_placement_line() -> None:
    assert "Placement:" not in render(explained(job_object(state=state()), hpa=None))


class NoPodsAllowed:
    """A client whose identity may not list pods."""

    def may(self, verb: str, resource: Any, *, namespace: str | None = None) -> bool:
        assert (verb, resource.plural, namespace) == ("list", "pods", "team")
        return False

    def list(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("listed pods it may not list")


def test_a_caller_who_may_not_list_pods_gets_no_placement() -> None:
    assert workers_of(NoPodsAllowed(), "team", "job") is None  # type: ignore[arg-type]
