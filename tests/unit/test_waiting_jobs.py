"""Waiting jobs: which jobs a policy sees waiting, the prior curve it sizes them by (declared >
earlier observations > the engine's default > none), the default policy's choice of which starts,
the engine's one-write suspension of a job that never ran, and the simulator's same path."""

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from autoscaler.api import coordinates as c
from autoscaler.engine.config import EngineConfig, PolicySelection, SettleConfig
from autoscaler.engine.engine import Engine
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.snapshot import job_snapshot, snapshot
from autoscaler.engine.state import JobState, Point
from autoscaler.engine.waiting import per_worker_rates, unstarted, waiting
from autoscaler.policies.contract import Decision, JobSnapshot, ModelCurve, Snapshot
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig
from autoscaler.policies.speedup import job_curve
from autoscaler.policies.throughput_model import ThroughputModel
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.workload import WorkloadJob
from tests.support.clock import NOW
from tests.support.engine_jobs import managed_job
from tests.support.memory_cluster import START, CurveThroughput, MemoryCluster, make_job

GPU = c.GPU_RESOURCE
ONE_GPU = {GPU: 1.0}
PROFILE = {1: 120.0, 2: 230.0, 4: 430.0}


def new(**changes: Any) -> ManagedJob:
    """A preemptible job that has not started: its pods are not placed yet."""
    fields: dict[str, Any] = {"active": 0, "preemptible": True, "resources_per_replica": ONE_GPU}
    return managed_job(**{**fields, **changes})


def observed(*points: tuple[int, float], attained: float = 0.0) -> JobState:
    return JobState(
        throughput={n: Point(samples_per_second=t, observed_at=NOW) for n, t in points},
        attained_seconds=attained,
    )


HELD = {"suspended": True, "held_since": NOW - timedelta(minutes=5)}


# (job, the engine's state of it, waits?)
WHO_WAITS: list[tuple[str, ManagedJob, JobState, bool]] = [
    ("not started", new(), JobState(), True),
    ("not preemptible", new(preemptible=False), JobState(), False),
    ("running", new(active=4), JobState(), False),
    ("pods placed, starting", new(unready=4), JobState(), False),
    ("ran, now pending", new(), JobState(attained_seconds=60.0), False),
    ("observed before", new(), observed((4, 400.0)), False),
    ("held back", new(**HELD), observed((4, 400.0), attained=600.0), True),
    ("held back, not preemptible", new(preemptible=False, **HELD), JobState(), True),
    ("its user suspended it", new(suspended=True), JobState(), False),
]


@pytest.mark.parametrize(("why", "job", "state", "waits"), WHO_WAITS)
def test_which_jobs_wait(why: str, job: ManagedJob, state: JobState, waits: bool) -> None:
    assert waiting(job, state) is waits, why
    assert job_snapshot(job, state, now=NOW).waiting is waits, why


RATES = {tuple(ONE_GPU.items()): 100.0}


DECLARED = ModelCurve(source="declared", values=PROFILE)
RUNNING = {"active": 4, "throughput_profile": PROFILE}
SEEN = observed((4, 50.0))
# (why, job, state, rates, the engine trusts declared profiles?, the curve it is shown with)
CURVES: list[tuple[str, ManagedJob, JobState, Any, bool, ModelCurve | None]] = [
    ("declared wins", new(throughput_profile=PROFILE), JobState(), RATES, False, DECLARED),
    ("declared wins over earlier observations", new(throughput_profile=PROFILE, **HELD),
     observed((2, 50.0)), RATES, False, DECLARED),
    ("earlier observations: fitted from `throughput`", new(**HELD), observed((2, 50.0)), RATES,
     False, None),
    ("the default: linear at the median rate", new(min_replicas=2, max_replicas=4), JobState(),
     RATES, False, ModelCurve(source="prior", values={2: 200.0, 3: 300.0, 4: 400.0})),
    ("the default at its allowed counts", new(allowed_replicas=(2, 8)), JobState(), RATES, False,
     ModelCurve(source="prior", values={2: 200.0, 8: 800.0})),
    ("nothing observed of its hardware: none", new(resources_per_replica={GPU: 8.0}),
     JobState(), RATES, False, None),
    ("nothing observed at all: none", new(), JobState(), {}, False, None),
    ("not waiting: none", new(**RUNNING), JobState(), RATES, False, None),
    ("not preemptible: none", new(preemptible=False, throughput_profile=PROFILE), JobState(),
     RATES, False, None),
    ("running, trusted: its declared curve", new(**RUNNING), SEEN, RATES, True, DECLARED),
    ("running, not preemptible, trusted", new(preemptible=False, **RUNNING), SEEN, RATES, True,
     DECLARED),
    ("running, trusted, nothing declared", new(active=4), SEEN, RATES, True, None),
    ("waiting, trusted: as untrusted", new(throughput_profile=PROFILE), JobState(), RATES, True,
     DECLARED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("job", "state", "rates", "trusted", "curve"),
    [row[1:] for row in CURVES],
    ids=[row[0] for row in CURVES],
)
def test_the_curve_a_job_is_shown_waiting_or_trusted_running(
    job: ManagedJob, state: JobState, rates: Any, trusted: bool, curve: ModelCurve | None
) -> None:
    shown = job_snapshot(job, state, now=NOW, rates=rates, trust_declared=trusted)
    assert shown.curve == curve
    # Observations are shown beside a model curve either way.
    assert shown.throughput == {n: p.samples_per_second for n, p in state.throughput.items()}


def test_the_default_rate_is_the_median_per_worker_rate_of_running_jobs_by_hardware() -> None:
    jobs = {
        "a": (new(name="a", active=2), observed((2, 100.0))),  # 50 per worker
        "b": (new(name="b", active=4), observed((4, 280.0))),  # 70
        "c": (new(name="c", active=1), observed((1, 90.0))),  # 90
        "big": (new(name="big", active=1, resources_per_replica={GPU: 8.0}), observed((1, 9.0))),
        "held": (new(name="held", **HELD), observed((1, 1000.0))),
        "pending": (new(name="pending"), JobState()),
    }
    latest = JobState(
        throughput={
            1: Point(samples_per_second=10.0, observed_at=NOW - timedelta(hours=1)),
            2: Point(samples_per_second=300.0, observed_at=NOW),  # its latest: 150 per worker
        }
    )
    jobs["d"] = (new(name="d", active=2), latest)
    states = {job.key: state for job, state in jobs.values()}
    rates = per_worker_rates([job for job, _ in jobs.values()], states)
    assert rates == {((GPU, 1.0),): 80.0, ((GPU, 8.0),): 9.0}  # median of 50, 70, 90, 150
    listed = [job for job, _ in jobs.values()]
    view = snapshot(
        listed, states, capacity={GPU: 16.0}, now=NOW, restart_seconds=15.0,
        prior="running-median",
    )  # fmt: skip
    (pending,) = [j for j in view.jobs if j.name == "pending"]
    assert pending.waiting
    assert pending.curve == ModelCurve(source="prior", values={n: 80.0 * n for n in range(1, 9)})
    # The engine's default: no prior, so the job starts at its count as today.
    plain = snapshot(listed, states, capacity={GPU: 16.0}, now=NOW, restart_seconds=15.0)
    (pending,) = [j for j in plain.jobs if j.name == "pending"]
    assert pending.waiting
    assert pending.curve is None


def test_a_model_curve_has_no_exploration_bound_observations_keep_theirs() -> None:
    model = ThroughputModel()  # one count past the largest observed
    shown = JobSnapshot(
        namespace="ns", name="j", min_replicas=1, max_replicas=8, replicas=1,
        curve=ModelCurve(source="declared", values=PROFILE),
    )  # fmt: skip
    declared = job_curve(shown, model=model)
    assert np.isfinite(declared.throughput).all()
    assert [declared.at(n) for n in PROFILE] == list(PROFILE.values())
    plain = job_curve(shown.model_copy(update={"curve": None, "throughput": PROFILE}), model=model)
    assert np.isfinite(plain.throughput[:5]).all()
    assert np.isnan(plain.throughput[5:]).all()  # past 4 + 1


# The default policy (completion time, p = -0.25, 15 s restarts, a hold valued at 3,600 s).
POLICY = GlobalOptimizer(GlobalOptimizerConfig())


def waiting_snap(name: str, remaining: float, **fields: Any) -> JobSnapshot:
    """2 to 4 workers of 1 GPU, not started, priced by its declared 1 sample/s per worker."""
    values: dict[str, Any] = {
        "namespace": "ns", "name": name, "min_replicas": 2, "max_replicas": 4, "replicas": 2,
        "resources_per_replica": ONE_GPU, "remaining_samples": remaining, "preemptible": True,
        "waiting": True, "curve": ModelCurve(source="declared", values={2: 2.0, 3: 3.0, 4: 4.0}),
    }  # fmt: skip
    return JobSnapshot(**{**values, **fields})


def running_snap(name: str, remaining: float) -> JobSnapshot:
    return waiting_snap(name, remaining, waiting=False, preemptible=False, curve=None).model_copy(
        update={"throughput": {2: 2.0, 3: 3.0, 4: 4.0}}
    )


def decide(*jobs: JobSnapshot, gpus: float) -> dict[str, tuple[int, str]]:
    view = Snapshot(capacity={GPU: gpus}, jobs=list(jobs))
    return {d.name: (d.replicas, d.reason) for d in POLICY.decide(view, now=NOW)}


# Utility E^-0.25, E the remaining seconds; a waiting job pays its start's 15 s at every count.
# Room for one: short first: 215^-.25 + (3,600 + 15 + 20,000)^-.25 = 0.2611 + 0.0807 = 0.3418;
#               long first:  20,015^-.25 + (3,600 + 15 + 200)^-.25 = 0.0841 + 0.1272 = 0.2113.
# Room for 6: both start, short at 4: 115^-.25 + 20,015^-.25 = 0.3054 + 0.0841 = 0.3895, above
#   holding long (0.3861) and 3 + 3 (148^-.25 + 13,348^-.25 = 0.2882 + 0.0929 = 0.3811).
# A running short job and a waiting long one, 4 GPUs: both minimums fit, so both start at 2
#   (holding long, 115^-.25 + 23,615^-.25 = 0.3861, would beat 200^-.25 + 20,015^-.25 = 0.3500,
#   but a job waits only when the minimums do not fit).
@pytest.mark.parametrize(
    ("jobs", "gpus", "expected"),
    [
        ((waiting_snap("long", 40_000), waiting_snap("short", 400)), 2.0,
         {"long": 0, "short": 2}),
        ((waiting_snap("long", 40_000), waiting_snap("short", 400)), 6.0,
         {"long": 2, "short": 4}),
        ((waiting_snap("long", 40_000), running_snap("short", 400)), 4.0,
         {"long": 2, "short": 2}),
        ((waiting_snap("short", 400),), 4.0, {"short": 4}),
    ],
)  # fmt: skip
def test_the_default_policy_chooses_which_waiting_job_starts_and_at_what_count(
    jobs: tuple[JobSnapshot, ...], gpus: float, expected: dict[str, int]
) -> None:
    decided = decide(*jobs, gpus=gpus)
    assert {name: count for name, (count, _) in decided.items()} == expected
    assert {reason for _, reason in decided.values()} == {"OptimalAllocation"}


def test_a_waiting_job_without_a_curve_or_a_preemptible_one_keeps_todays_rule() -> None:
    blind = waiting_snap("blind", 400, curve=None)
    assert decide(blind, gpus=4.0) == {"blind": (2, "NoThroughputData")}
    fixed = waiting_snap("fixed", 40_000, preemptible=False)
    decided = decide(fixed, running_snap("short", 400), gpus=4.0)
    assert decided["fixed"][0] == 2  # never 0: at least its minimum


class Scripted:
    """Each job's count from a table; remembers every snapshot it was given."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.seen: list[Snapshot] = []

    def decide(self, view: Snapshot, *, now: datetime) -> list[Decision]:
        self.seen.append(view)
        return [
            Decision(j.namespace, j.name, self.counts[j.name], "Scripted", "s") for j in view.jobs
        ]


class RunningThroughput(CurveThroughput):
    """100 samples/s per worker, read only from workers that run."""

    def read(self, jobs: Any, *, now: datetime) -> dict[JobKey, float | None]:
        return {job.key: 100.0 * job.active if job.active else None for job in jobs}


def _engine(
    jobs: list[ManagedJob], policy: Scripted, *, trust_declared: bool = False
) -> tuple[Engine, MemoryCluster]:
    cluster = MemoryCluster(jobs_={j.key: j for j in jobs}, gpus=16.0)
    settle = SettleConfig(
        settle_seconds=0, cooldown_seconds=60, scale_down_stabilization_seconds=0,
        min_run_seconds=120, max_held_seconds=300,
    )  # fmt: skip
    config = EngineConfig(
        interval_seconds=30,
        settle=settle,
        policy=PolicySelection(),
        trust_declared_profiles=trust_declared,
    )
    engine = Engine(
        cluster=cluster,
        throughput=RunningThroughput(cluster=cluster, curves={}),
        policy=policy,
        policy_name="scripted",
        config=config,
    )
    return engine, cluster


def test_the_engine_holds_back_a_job_that_never_ran_in_one_write_and_the_bound_resumes_it() -> None:
    fresh = replace(make_job("fresh", preemptible=True, throughput_profile=PROFILE), active=0)
    fixed = replace(make_job("fixed", throughput_profile=PROFILE), active=0)
    policy = Scripted({"fresh": 0, "fixed": 0, "run": 2})
    engine, cluster = _engine([fresh, fixed, make_job("run")], policy)
    at = [START + timedelta(seconds=30 * i) for i in range(20)]
    report = engine.run_once(now=at[0])
    shown = {j.name: j for j in policy.seen[-1].jobs}
    assert (shown["fresh"].waiting, shown["fresh"].preemptible) == (True, True)
    assert shown["fresh"].curve == ModelCurve(source="declared", values=PROFILE)
    assert (shown["fixed"].waiting, shown["fixed"].curve) == (False, None)
    assert cluster.writes == [("fresh", 0)]  # the suspension, and nothing else
    assert cluster.jobs_[fresh.key].held_back
    reasons = {o.job.name: o.settled.reason for o in report.outcomes}
    assert reasons["fresh"] == "HeldBack"
    assert reasons["fixed"] == "MetricsUnavailable"  # as before: it starts once its pods fit
    assert ("fresh", "HeldBack", False) in cluster.events
    for now in at[1:]:
        engine.run_once(now=now)
        if not cluster.jobs_[fresh.key].suspended:
            break
    assert (now - at[0]).total_seconds() == 300  # the starvation bound, to the round
    assert cluster.writes[-1] == ("fresh", 1)  # its minimum, whatever the policy says
    assert unstarted(cluster.jobs_[fresh.key], engine.states[fresh.key]) is False


@pytest.mark.parametrize("trusted", [False, True])
def test_the_engine_shows_a_running_jobs_declared_curve_when_it_trusts_profiles(
    trusted: bool,
) -> None:
    policy = Scripted({"run": 4})
    engine, _ = _engine(
        [make_job("run", throughput_profile=PROFILE)], policy, trust_declared=trusted
    )
    engine.run_once(now=START)
    (shown,) = policy.seen[-1].jobs
    assert shown.waiting is False
    assert shown.curve == (DECLARED if trusted else None)


LINEAR = {
    "linear": Profile(
        name="linear", gpu_counts=(1, 2, 4, 8), rows=(ProfileRow(10, (1.0, 2.0, 4.0, 8.0)),)
    )
}


def test_in_the_simulator_a_queued_job_given_0_leaves_the_queue_and_returns_to_it() -> None:
    """4 GPUs: `a` runs at 4; `b` arrives and waits in the queue; the engine holds it back
    there (it never ran: no rescale) and resumes it through the queue, where it starts free."""
    jobs = [
        WorkloadJob("a", 0.0, "linear", 10, 2_000, 1, 4, 4),
        WorkloadJob("b", 30.0, "linear", 10, 400, 1, 4, 2),
    ]
    config = SimConfig(gpus=4, interval_seconds=60.0, restart_seconds=30.0, preemptible=True)
    sim = Simulation(workload=jobs, profiles=LINEAR, config=config)
    policy = Scripted({"a": 4, "b": 0})
    engine = Engine(
        cluster=sim.cluster,
        throughput=sim.throughput,
        policy=policy,
        policy_name="scripted",
        config=EngineConfig(
            interval_seconds=60.0, settle=SettleConfig(settle_seconds=0, max_held_seconds=240)
        ),
    )
    try:
        result = sim.run(decide_round=lambda now: engine.run_once(now=now))
    finally:
        engine.close()
    b = {j.name: j for j in result.jobs}["b"]
    assert result.finished == 2
    assert (b.suspensions, b.rescales) == (1, 0)
    waited = next(v for v in policy.seen if any(j.name == "b" for j in v.jobs))
    assert {j.name: j.waiting for j in waited.jobs} == {"a": False, "b": True}
    assert b.start is not None
    assert b.finish is not None
    assert b.finish - b.start == pytest.approx(400 / 1.0)  # no restart stall: at 1 worker
