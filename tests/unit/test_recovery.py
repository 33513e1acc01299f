"""A recovering job, as tables with time injected: what counts as a disturbance, how long the
job is held for it, and that its readings meanwhile are no curve point."""

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from autoscaler.clients.jobs import worker_health
from autoscaler.engine.config import EngineConfig, PolicySelection, SettleConfig
from autoscaler.engine.engine import Engine
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.recovery import RECOVERING, disturbance, recover, recovering
from autoscaler.engine.settle import hold, observe
from autoscaler.engine.state import JobState, Point
from autoscaler.policies.contract import Decision
from tests.support.clock import NOW
from tests.support.engine_jobs import managed_job
from tests.support.memory_cluster import START, CurveThroughput, MemoryCluster, make_job

CONFIG = SettleConfig(settle_seconds=60, stall_seconds=20, cooldown_seconds=120)
SECOND = timedelta(seconds=1)


job = managed_job


def state(**changes: object) -> JobState:
    """A steady job at 4 workers: restarts and progress seen last round (10 s ago)."""
    point = Point(samples_per_second=100.0, observed_at=NOW - 10 * SECOND)
    fields: dict[str, Any] = {
        "replicas": 4,
        "throughput": {4: point},
        "restarts_seen": 3,
        "progress_samples": 5_000.0,
        "progressed_at": NOW - 10 * SECOND,
    }
    return JobState(**{**fields, **changes})


@pytest.mark.parametrize(
    ("the_job", "the_state", "done", "cause"),
    [
        (job(restarts=3), state(), 6_000.0, ""),  # whole
        (job(restarts=3, unready=1), state(), 6_000.0, "1 worker pod placed on a node is not"),
        (job(restarts=3, unready=2), state(), 6_000.0, "2 worker pods placed on nodes are not"),
        (job(restarts=5), state(), 6_000.0, "containers restarted (2 more)"),
        (job(restarts=0), state(), 6_000.0, ""),  # fewer: a pod with restarts was replaced
        (
            job(restarts=0),
            state(restarts_seen=None),
            6_000.0,
            "",
        ),  # first sight: nothing to compare
        (job(restarts=3), state(), 5_000.0, ""),  # still, but only for 10 s of the 20
        (
            job(restarts=3),
            state(progressed_at=NOW - 20 * SECOND),
            5_000.0,
            "progress has not advanced for 20 s",
        ),
        (job(restarts=3), state(progressed_at=NOW - 20 * SECOND), None, ""),  # reports none
        (job(restarts=3), state(progressed_at=NOW - 20 * SECOND), 4_000.0, ""),  # went back
        # Not a world that runs (starting, below its minimum): other holds see to it.
        (job(restarts=3, active=0), state(progressed_at=NOW - 60 * SECOND), 5_000.0, ""),
        # Within settle_seconds of its last rescale or its start: unready pods and a stall are
        # that rescale's own re-forming; a container restart is a fault (a rescale restarts none).
        (job(restarts=3, unready=2), state(last_rescale=NOW - 59 * SECOND), 5_000.0, ""),
        (job(restarts=3, unready=2, created=NOW - 30 * SECOND), state(), 5_000.0, ""),
        (
            job(restarts=3),
            state(last_rescale=NOW - 59 * SECOND, progressed_at=NOW - 20 * SECOND),
            5_000.0,
            "",
        ),
        (
            job(restarts=5, unready=2),
            state(last_rescale=NOW - 59 * SECOND),
            5_000.0,
            "containers restarted (2 more)",
        ),
        (job(restarts=5, created=NOW - 30 * SECOND), state(), 5_000.0, "restarted (2 more)"),
        (job(restarts=5, unready=2), state(last_rescale=NOW - 60 * SECOND), 5_000.0, "2 worker"),
        # Held back by the engine: no pods, nothing to recover.
        (job(unready=1, suspended=True, held_since=NOW - SECOND), state(), None, ""),
    ],
)
def test_a_disturbance_is_an_unready_pod_a_restart_or_progress_that_stopped(
    the_job: ManagedJob, the_state: JobState, done: float | None, cause: str
) -> None:
    found = disturbance(the_job, the_state, samples_done=done, now=NOW, config=CONFIG)
    assert (found == "") if not cause else (cause in found), found


def test_recover_remembers_what_it_saw_and_dates_a_disturbance() -> None:
    first = state(restarts_seen=None)
    whole = recover(job(restarts=4), first, samples_done=6_000.0, now=NOW, config=CONFIG)
    assert (whole.restarts_seen, whole.progress_samples, whole.progressed_at) == (4, 6_000.0, NOW)
    assert (whole.disturbance, whole.disturbed_at) == ("", None)  # first sight: none to compare
    again = recover(job(restarts=5), whole, samples_done=6_000.0, now=NOW + SECOND, config=CONFIG)
    assert again.disturbance.startswith("its workers' containers restarted")
    assert again.disturbed_at == NOW + SECOND
    assert again.progressed_at == NOW  # progress did not move
    later = NOW + 2 * SECOND
    healed = recover(job(restarts=5), again, samples_done=6_100.0, now=later, config=CONFIG)
    assert (healed.disturbance, healed.disturbed_at) == ("", NOW + SECOND)  # the date stays


def test_the_marks_are_never_stored_a_new_leader_sees_afresh() -> None:
    saved = JobState.from_json(state(disturbed_at=NOW, disturbance="x").to_json())
    assert (saved.restarts_seen, saved.progress_samples, saved.progressed_at) == (None, None, None)
    assert (saved.disturbance, saved.disturbed_at) == ("x", NOW)


@pytest.mark.parametrize(
    ("the_state", "reading", "reason", "message"),
    [
        (state(disturbance="1 worker pod ...", disturbed_at=NOW), 3.0, RECOVERING, "1 worker pod"),
        # Recovering says more than no reading: a stalled world often has none.
        (state(disturbance="stalled", disturbed_at=NOW), None, RECOVERING, "stalled"),
        # Whole again, but the rate window still holds the stall: settle_seconds more.
        (state(disturbed_at=NOW - 59 * SECOND), 100.0, RECOVERING, "whole again"),
        (state(disturbed_at=NOW - 60 * SECOND), 100.0, None, ""),
        (state(disturbed_at=NOW - 60 * SECOND), None, "MetricsUnavailable", ""),
        (state(), 100.0, None, ""),
    ],
)
def test_a_recovering_job_is_held_until_its_readings_are_whole(
    the_state: JobState, reading: float | None, reason: str | None, message: str
) -> None:
    held = hold(job(), the_state, reading=reading, now=NOW, config=CONFIG)
    assert (held.reason if held else None) == reason
    if held is not None and message:
        assert message in held.message
        assert held.replicas == 4
    assert (recovering(job(), the_state, now=NOW, config=CONFIG) is not None) == (
        reason == RECOVERING
    )


@pytest.mark.parametrize(
    ("the_job", "the_state", "done", "recorded"),
    [
        (job(restarts=3), state(), 6_000.0, True),
        (job(restarts=3, unready=1), state(), 6_000.0, False),  # disturbed this round
        (job(restarts=4), state(), 6_000.0, False),
        (job(restarts=3), state(progressed_at=NOW - 20 * SECOND), 5_000.0, False),
        (job(restarts=3), state(disturbed_at=NOW - 59 * SECOND), 6_000.0, False),  # window
        (job(restarts=3), state(disturbed_at=NOW - 60 * SECOND), 6_000.0, True),
    ],
)
def test_readings_of_a_recovering_job_are_no_curve_point(
    the_job: ManagedJob, the_state: JobState, done: float, recorded: bool
) -> None:
    observed = observe(the_job, the_state, reading=1.5, now=NOW, config=CONFIG, samples_done=done)
    point = observed.throughput[4]
    assert (point.observed_at == NOW) == recorded
    assert point.samples_per_second == (1.5 if recorded else 100.0)


def pod(
    name: str,
    *,
    job_name: str = "j",
    kind: str = "worker",
    node: str | None = "n1",
    ready: str | None = "True",
    phase: str = "Running",
    restarts: tuple[int, ...] = (0,),
    deleting: bool = False,
) -> dict[str, Any]:
    labels = {
        "training.kubeflow.org/job-name": job_name,
        "training.kubeflow.org/replica-type": kind,
    }
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": "pytorch", "restartCount": n} for n in restarts],
    }
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready}]
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}, "status": status}


@pytest.mark.parametrize(
    ("pods", "health"),
    [
        ([pod("a"), pod("b", restarts=(2,))], {("ns", "j"): (0, 2)}),
        ([pod("a", ready="False"), pod("b", ready=None)], {("ns", "j"): (2, 0)}),  # lost, starting
        ([pod("a", deleting=True)], {("ns", "j"): (1, 0)}),  # leaving the world
        ([pod("a", node=None, ready=None, phase="Pending")], {}),  # unplaced: capacity, not recovery
        ([pod("a", phase="Succeeded", ready="False", restarts=(1,))], {}),  # finished
        ([pod("m", kind="master", ready="False"), pod("l", kind="lighthouse")], {}),  # not workers
        ([pod("a", restarts=(1, 2)), pod("x", job_name="k", ready="False")],
         {("ns", "j"): (0, 3), ("ns", "k"): (1, 0)}),
    ],
)  # fmt: skip
def test_worker_health_counts_placed_pods_not_ready_and_their_restarts(
    pods: list[dict[str, Any]], health: dict[tuple[str, str], tuple[int, int]]
) -> None:
    assert worker_health(pods) == health


SHRINK = type(
    "Shrink",
    (),
    {"decide": lambda self, view, *, now: [Decision(j.namespace, j.name, 2, "Shrink", "") for j in view.jobs]},
)()  # fmt: skip


def test_the_engine_holds_a_recovering_job_announces_it_once_and_sizes_it_when_whole() -> None:
    """A policy that wants the job at 2: while a worker pod is not ready, and for settle_seconds
    after, the job keeps its 4 (one `Recovering` Event, no point at its stalled reading); then
    the policy's wish is written (so the hold is what kept it)."""
    settle = SettleConfig(settle_seconds=60, cooldown_seconds=0, scale_down_stabilization_seconds=0)
    config = EngineConfig(settle=settle, policy=PolicySelection(timeout_seconds=1.0))
    start = make_job("lost", replicas=4, unready=1)
    cluster = MemoryCluster({start.key: start}, gpus=20.0)
    throughput = CurveThroughput(cluster, {"lost": lambda n: 0.5})  # near nothing: stalled
    engine = Engine(
        cluster=cluster, throughput=throughput, policy=SHRINK, policy_name="p", config=config
    )
    try:
        times = [START + timedelta(seconds=30 * i) for i in range(8)]
        for i, now in enumerate(times):
            if i == 3:  # the pod is ready again: the world is whole
                cluster.jobs_[start.key] = dataclasses.replace(cluster.jobs_[start.key], unready=0)
            report = engine.run_once(now=now)
            if i < 4:  # disturbed until round 2 (at 60 s), then held until 120 s
                assert report.outcomes[0].settled.reason == RECOVERING, (i, report.outcomes[0])
                assert cluster.writes == [], i
                assert engine.states[start.key].throughput == {}, i
        assert cluster.jobs_[start.key].replicas == 2
        assert [e for e in cluster.events if e[1] == RECOVERING] == [("lost", RECOVERING, False)]
    finally:
        engine.close()
