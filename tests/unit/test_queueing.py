"""Queueing's pure steps as tables: suspend, stay held back, resume, the starvation bound, and what
a policy is shown; then the engine on an in-memory cluster (user-suspended jobs untouched)."""

import dataclasses
from datetime import datetime, timedelta

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.engine.config import EngineConfig, PolicySelection, SettleConfig
from autoscaler.engine.engine import Engine
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.queueing import (
    may_hold,
    queue,
    queue_view,
    resume_count,
    resumed,
    suspended,
    waiting_hold,
)
from autoscaler.engine.settle import Settled, fit_capacity, limit_rescales
from autoscaler.engine.snapshot import snapshot
from autoscaler.engine.state import JobState, Step
from autoscaler.observability.engine_metrics import engine_metrics
from autoscaler.policies.contract import Decision, Snapshot
from tests.support.clock import NOW
from tests.support.memory_cluster import GPU, START, CurveThroughput, MemoryCluster, make_job

CONFIG = SettleConfig(cooldown_seconds=120, min_run_seconds=600, max_held_seconds=3600)


def job(**changes: object) -> ManagedJob:
    fields: dict[str, object] = {
        "namespace": "ns",
        "name": "j",
        "min_replicas": 2,
        "max_replicas": 8,
        "replicas": 4,
        "active": 4,
        "owner": Owner.ENGINE,
        "created": NOW - timedelta(hours=3),
        "resources_per_replica": {GPU: 1.0},
    }
    return ManagedJob(**{**fields, **changes})  # type: ignore[arg-type]


def waiting(seconds: float, **changes: object) -> ManagedJob:
    """A preemptible job the engine held back `seconds` ago."""
    since = NOW - timedelta(seconds=seconds)
    return job(preemptible=True, suspended=True, held_since=since, active=0, **changes)


def wish(replicas: int) -> Step:
    return Step(name="policy", replicas=replicas, reason="OptimalAllocation", message="m")


HOLD = Step(name="hold", replicas=4, reason="RescaleCooldown", message="cooling down")


@pytest.mark.parametrize(
    ("case", "the_job", "state", "proposed", "held", "replicas", "names", "reason"),
    [
        ("a count: the usual settle steps", job(preemptible=True), JobState(), 6, None, None,
         [], "OptimalAllocation"),
        ("a preemptible job's 0: suspended", job(preemptible=True), JobState(), 0, None, 0,
         ["policy", "suspend"], "HeldBack"),
        ("a 0 while held: its minimum, settled as usual", job(preemptible=True), JobState(), 0,
         HOLD, None, ["policy"], "HoldBackRefused"),
        ("a non-preemptible job's 0: its minimum", job(), JobState(), 0, None, None,
         ["policy"], "NotPreemptible"),
        ("resumed by the bound 10 min ago: not held back again",
         job(preemptible=True), JobState(forced_resume=NOW - timedelta(minutes=10)), 0, None,
         None, ["policy"], "HoldBackRefused"),
        ("resumed 5 min ago: not held back again yet (min_run_seconds)",
         job(preemptible=True), JobState(resumed_at=NOW - timedelta(minutes=5)), 0, None,
         None, ["policy"], "HoldBackRefused"),
        ("resumed by the bound an hour ago: held back again",
         job(preemptible=True), JobState(forced_resume=NOW - timedelta(hours=1)), 0, None, 0,
         ["policy", "suspend"], "HeldBack"),
        ("held back, given 0: stays", waiting(600), JobState(), 0, None, 0, ["policy"],
         "OptimalAllocation"),
        ("held back, held: stays whatever the count", waiting(600), JobState(), 6, HOLD, 0,
         ["policy", "hold"], "RescaleCooldown"),
        ("held back, given 6: resumed at 6", waiting(600), JobState(), 6, None, 6,
         ["policy", "resume"], "OptimalAllocation"),
        ("held back, given 20: resumed at its maximum", waiting(600), JobState(), 20, None, 8,
         ["policy", "resume"], "OptimalAllocation"),
        ("held back 1 h, given 0: resumed at its minimum", waiting(3600), JobState(), 0, None, 2,
         ["policy", "starvation"], "HeldTooLong"),
        ("held back 1 h and held: resumed anyway", waiting(3601), JobState(), 0, HOLD, 2,
         ["policy", "starvation"], "HeldTooLong"),
        ("held back 1 h, given 5: resumed at 5", waiting(4000), JobState(), 5, None, 5,
         ["policy", "starvation"], "HeldTooLong"),
    ],
)  # fmt: skip
def test_queue(
    *,
    case: str,
    the_job: ManagedJob,
    state: JobState,
    proposed: int,
    held: Step | None,
    replicas: int | None,
    names: list[str],
    reason: str,
) -> None:
    queued = queue(the_job, state, proposal=wish(proposed), held=held, now=NOW, config=CONFIG)
    if replicas is None:  # left to the usual settle steps, with this proposal
        assert queued.settled is None, case
        assert [step.name for step in queued.prefix] == names, case
        assert queued.proposal.reason == reason, case
        assert queued.proposal.replicas == (proposed or the_job.min_replicas), case
        return
    assert queued.settled is not None, case
    assert queued.settled.replicas == replicas, case
    assert [step.name for step in queued.settled.steps] == names, case
    assert queued.settled.reason == reason, case


def test_the_bounds_message_says_how_long_and_the_setting() -> None:
    queued = queue(waiting(3700), JobState(), proposal=wish(0), held=None, now=NOW, config=CONFIG)
    assert queued.settled is not None
    assert queued.settled.steps[-1].message == (
        "held back 3700 s, the bound is 3600 s (settle.max_held_seconds): resumed at 2 workers"
        " whatever the policy wished"
    )


@pytest.mark.parametrize(
    ("allowed", "wished", "count"),
    [(None, 3, 3), (None, 1, 2), (None, 9, 8), ((2, 4, 8), 6, 4), ((2, 4, 8), 8, 8),
     ((4, 8), 3, 4)],
)  # fmt: skip
def test_a_resume_count_keeps_to_the_bounds_and_allowed_counts(
    allowed: tuple[int, ...] | None, wished: int, count: int
) -> None:
    assert resume_count(job(allowed_replicas=allowed), wished) == count


@pytest.mark.parametrize(
    ("the_job", "state", "result"),
    [
        (job(), JobState(), False),
        (job(preemptible=True), JobState(), True),
        (waiting(100), JobState(), True),
        (waiting(3600), JobState(), False),  # due: must run
        (job(preemptible=True), JobState(forced_resume=NOW - timedelta(seconds=3599)), False),
        (job(preemptible=True), JobState(forced_resume=NOW - timedelta(seconds=3600)), True),
        (job(preemptible=True), JobState(resumed_at=NOW - timedelta(seconds=599)), False),
        (job(preemptible=True), JobState(resumed_at=NOW - timedelta(seconds=600)), True),
    ],
)
def test_which_jobs_a_policy_may_give_0(the_job: ManagedJob, state: JobState, result: bool) -> None:
    assert may_hold(the_job, state, now=NOW, config=CONFIG) is result


@pytest.mark.parametrize(
    ("held_for", "last_rescale", "reason"),
    [
        (60, None, "RescaleCooldown"),  # its suspension was a minute ago
        (300, None, None),
        (300, NOW - timedelta(seconds=30), "RescaleCooldown"),  # a new leader's stored rescale
        (3600, NOW - timedelta(seconds=30), None),  # due: nothing holds it
    ],
)
def test_what_keeps_a_held_back_job_waiting(
    held_for: float, last_rescale: datetime | None, reason: str | None
) -> None:
    step = waiting_hold(
        waiting(held_for), JobState(last_rescale=last_rescale), now=NOW, config=CONFIG
    )
    assert (step.reason if step else None) == reason
    assert step is None or step.replicas == 0


def test_a_policy_sees_who_waits_and_who_may_wait_and_not_those_that_must_stay_held() -> None:
    jobs = [
        job(name="plain"),
        job(name="may", preemptible=True),
        waiting(600, name="waits"),
        waiting(60, name="cooling"),
        waiting(3600, name="due"),
        job(name="held", preemptible=True),
    ]
    states = {j.key: JobState() for j in jobs}
    holds = {
        ("ns", "cooling"): waiting_hold(jobs[3], JobState(), now=NOW, config=CONFIG),
        ("ns", "held"): HOLD,
    }
    view = snapshot(jobs, states, capacity={GPU: 16}, now=NOW, restart_seconds=15)
    shown = queue_view(view, {j.key: j for j in jobs}, states, holds, now=NOW, config=CONFIG)
    seen = {j.name: (j.preemptible, j.suspended, j.held_seconds) for j in shown.jobs}
    assert seen == {
        "plain": (False, False, None),
        "may": (True, False, None),
        "waits": (True, True, 600.0),
        "due": (False, True, 3600.0),
        "held": (False, False, None),
    }


def test_a_suspension_and_a_resume_are_restarts_the_resume_with_a_whole_budget() -> None:
    state = JobState(replicas=4, rescales=2, restarts_spent=2)
    after = suspended(state, now=NOW)
    assert (after.rescales, after.suspensions, after.last_rescale) == (3, 1, NOW)
    assert (after.replicas, after.restarts_spent) == (4, 2)
    later = NOW + timedelta(minutes=5)
    back = resumed(after, to=6, now=later, forced=False)
    assert (back.rescales, back.last_rescale, back.replicas, back.restarts_spent) == (
        4,
        later,
        6,
        0,
    )
    assert (back.forced_resume, back.resumed_at) == (None, later)
    assert resumed(after, to=6, now=later, forced=True).forced_resume == later


def test_a_held_back_job_counts_as_0_workers_for_the_limit_and_the_capacity() -> None:
    jobs = [waiting(600, name="waits"), job(name="runs", replicas=4)]
    resume = Step(name="resume", replicas=4, reason="OptimalAllocation", message="m")
    stay = Settled(replicas=0, steps=(wish(0),))
    settled = {("ns", "waits"): stay, ("ns", "runs"): Settled(replicas=4, steps=(wish(4),))}
    assert limit_rescales(jobs, settled, {}, limit=0) == settled  # staying held is no rescale
    settled[("ns", "waits")] = Settled(replicas=4, steps=(wish(4), resume))
    undone = fit_capacity(jobs, settled, capacity={GPU: 6})  # 4 run: no room for 4 more
    assert undone[("ns", "waits")].replicas == 0
    assert undone[("ns", "waits")].reason == "InsufficientCapacity"
    assert fit_capacity(jobs, settled, capacity={GPU: 8})[("ns", "waits")].replicas == 4
    forced = Step(name="starvation", replicas=4, reason="HeldTooLong", message="m")
    settled[("ns", "waits")] = Settled(replicas=4, steps=(wish(0), forced))
    assert fit_capacity(jobs, settled, capacity={GPU: 6})[("ns", "waits")].replicas == 4


FORCED = Step(name="starvation", replicas=2, reason="HeldTooLong", message="m")


@pytest.mark.parametrize(
    ("limit", "starving", "going"),
    [
        # scale-downs and suspensions sort first, yet the job at its bound resumes this round
        (1, ["bound"], {"bound"}),
        (2, ["bound"], {"bound", "down-old"}),
        (3, ["bound"], {"bound", "down-old", "suspend"}),
        (5, ["bound"], {"bound", "down-old", "suspend", "down-new", "up"}),
        # more jobs at their bound than the limit: every one of them goes, nothing else
        (1, ["bound", "bound-too"], {"bound", "bound-too"}),
    ],
)
def test_a_resume_the_bound_forces_is_exempt_from_the_rescale_limit(
    limit: int, starving: list[str], going: set[str]
) -> None:
    running = {"down-old": (4, 2), "down-new": (4, 2), "suspend": (4, 0), "up": (4, 6)}
    jobs = [job(name=name, replicas=now) for name, (now, _) in running.items()]
    settled = {("ns", name): Settled(replicas=to, steps=(wish(to),))
               for name, (_, to) in running.items()}  # fmt: skip
    for name in starving:
        jobs.append(waiting(CONFIG.max_held_seconds, name=name))
        settled[("ns", name)] = Settled(replicas=2, steps=(wish(0), FORCED))
    states = {("ns", "down-new"): JobState(last_rescale=NOW - timedelta(minutes=10))}
    result = limit_rescales(jobs, settled, states, limit=limit)
    assert {key[1] for key, one in result.items() if one.reason != "RescalesLimited"} == going
    for name in starving:
        assert result[("ns", name)] == settled[("ns", name)]


class Scripted:
    """Each job's count from a table the test changes between rounds."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def decide(self, view: Snapshot, *, now: datetime) -> list[Decision]:
        return [
            Decision(j.namespace, j.name, self.counts[j.name], "Scripted", "s") for j in view.jobs
        ]


def _engine(
    jobs: list[ManagedJob], policy: Scripted, *, max_held: float = 3600, limit: int | None = 50
) -> tuple[Engine, MemoryCluster]:
    cluster = MemoryCluster(jobs_={j.key: j for j in jobs}, gpus=16.0)
    settle = SettleConfig(
        settle_seconds=0,
        cooldown_seconds=60,
        scale_down_stabilization_seconds=0,
        min_run_seconds=120,
        max_held_seconds=max_held,
        max_rescales_per_round=limit,
    )
    config = EngineConfig(
        interval_seconds=30, settle=settle, policy=PolicySelection(timeout_seconds=5)
    )
    curves = {j.name: (lambda n: 100.0 * n) for j in jobs}
    throughput = CurveThroughput(cluster=cluster, curves=curves)
    engine = Engine(
        cluster=cluster,
        throughput=throughput,
        policy=policy,
        policy_name="scripted",
        config=config,
        metrics=engine_metrics(),
    )
    return engine, cluster


def test_the_engine_suspends_resumes_and_enforces_the_bound_with_events_and_metrics() -> None:
    policy = Scripted({"long": 2, "plain": 2})
    long = make_job("long", preemptible=True)
    engine, cluster = _engine([long, make_job("plain")], policy, max_held=600)
    at = [START + timedelta(seconds=30 * i) for i in range(60)]
    engine.run_once(now=at[0])  # the first readings
    policy.counts = {"long": 0, "plain": 0}
    engine.run_once(now=at[1])
    assert cluster.writes == [("long", 0), ("plain", 1)]  # "plain" at its minimum, not held
    assert cluster.jobs_[long.key].held_back
    assert cluster.jobs_[long.key].replicas == 2  # the count it resumes at, by default
    assert ("long", "HeldBack", False) in cluster.events
    plain = engine.states[("ns", "plain")].last_decision
    assert plain is not None
    assert [s.reason for s in plain.steps][:2] == ["Scripted", "NotPreemptible"]
    waiting = engine.run_once(now=at[2])  # within its cooldown: stays whatever the policy says
    (outcome,) = [o for o in waiting.outcomes if o.job.name == "long"]
    assert (outcome.current, outcome.predicted, outcome.settled.reason) == (
        0,
        None,
        "RescaleCooldown",
    )
    policy.counts["long"] = 3
    engine.run_once(now=at[3])  # 90 s after: resumed at 3
    assert cluster.writes[-1] == ("long", 3)
    assert not cluster.jobs_[long.key].suspended
    assert ("long", "Resumed", False) in cluster.events
    policy.counts["long"] = 0
    for now in at[4:7]:  # not held back again within min_run_seconds of its resume
        engine.run_once(now=now)
        assert not cluster.jobs_[long.key].suspended
    engine.run_once(now=at[7])  # 120 s after it
    assert cluster.jobs_[long.key].held_back
    suspended_at = cluster.jobs_[long.key].held_since
    assert suspended_at is not None
    for now in at[8:]:
        engine.run_once(now=now)
        if not cluster.jobs_[long.key].suspended:
            break
    resumed_at = now
    assert (resumed_at - suspended_at).total_seconds() == 600  # the bound, to the round
    assert cluster.writes[-1] == ("long", 1)  # its minimum, though the policy said 0
    message = cluster.messages[-1][1]
    assert "resumed (HeldTooLong)" in message
    assert "settle.max_held_seconds" in message
    for now in [resumed_at + timedelta(seconds=30 * i) for i in range(1, 20)]:
        engine.run_once(now=now)  # the policy still says 0: not held back again for 600 s
        assert not cluster.jobs_[long.key].suspended
    assert engine.metrics is not None
    counted = {
        tuple(sample.labels.values()): sample.value
        for metric in engine.metrics.queueing.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    assert counted == {
        ("suspended", "Scripted"): 2.0,
        ("resumed", "Scripted"): 1.0,
        ("resumed", "HeldTooLong"): 1.0,
    }
    assert engine.states[long.key].suspensions == 2


def test_the_bound_holds_in_a_round_with_more_rescales_than_the_limit() -> None:
    """Three scale-downs (which sort first) and a job at its bound, one rescale a round: the
    held job is resumed in the round its bound falls due, the scale-downs wait."""
    policy = Scripted({"long": 2, "a": 2, "b": 2, "c": 2})
    jobs = [make_job(n, preemptible=n == "long") for n in ("long", "a", "b", "c")]
    engine, cluster = _engine(jobs, policy, max_held=300, limit=1)
    at = [START + timedelta(seconds=30 * i) for i in range(40)]
    engine.run_once(now=at[0])
    policy.counts["long"] = 0
    engine.run_once(now=at[1])
    suspended_at = cluster.jobs_[("ns", "long")].held_since
    assert suspended_at is not None
    due = suspended_at + timedelta(seconds=300)
    rounds = iter(at[2:])
    while (now := next(rounds)) < due:
        engine.run_once(now=now)
    assert cluster.jobs_[("ns", "long")].held_back
    policy.counts |= {"a": 1, "b": 1, "c": 1}
    writes = len(cluster.writes)
    report = engine.run_once(now=now)
    assert now == due
    assert cluster.writes[writes:] == [("long", 1)]  # its minimum, whatever the policy says
    reasons = {o.job.name: o.settled.reason for o in report.outcomes}
    assert reasons == {
        "long": "HeldTooLong", "a": "RescalesLimited", "b": "RescalesLimited",
        "c": "RescalesLimited",
    }  # fmt: skip


def test_a_job_its_user_suspended_is_never_sized_nor_resumed() -> None:
    policy = Scripted({"users": 4, "other": 2})
    users = dataclasses.replace(make_job("users", preemptible=True, suspended=True), active=0)
    engine, cluster = _engine([users, make_job("other")], policy, max_held=60)
    for i in range(10):
        report = engine.run_once(now=START + timedelta(minutes=i))
    assert [o.job.name for o in report.outcomes] == ["other"]
    assert all(name != "users" for name, _ in cluster.writes)
    assert cluster.jobs_[users.key].suspended


def test_a_failed_suspension_leaves_the_job_running_and_is_announced() -> None:
    policy = Scripted({"long": 2})
    engine, cluster = _engine([make_job("long", preemptible=True)], policy)
    engine.run_once(now=START)
    policy.counts["long"] = 0
    cluster.fail_writes = True
    engine.run_once(now=START + timedelta(seconds=30))
    assert ("long", "ScaleFailed", True) in cluster.events
    assert not cluster.jobs_[("ns", "long")].suspended
    assert engine.states[("ns", "long")].suspensions == 0
