"""The simulated cluster behind the engine's ports: capacity, pending pods, the queue, /scale."""

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import ManagedJob
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.results import RunResult
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.workload import WorkloadJob

ORIGIN = datetime(2025, 1, 1, tzinfo=UTC)
PROFILES = {
    # iterations/s = GPUs (batch 10: samples/s = 10 x GPUs); batch 20 does not fit on 1 GPU
    "linear": Profile(
        name="linear",
        gpu_counts=(1, 2, 4, 8, 16),
        rows=(
            ProfileRow(10, (1.0, 2.0, 4.0, 8.0, 16.0)),
            ProfileRow(20, (0.0, 1.0, 2.0, 4.0, 8.0)),
        ),
    )
}
Plan = Mapping[float, Mapping[str, int]]


def job(
    name: str,
    *,
    at: float = 0.0,
    iterations: int = 1000,
    low: int = 1,
    high: int = 8,
    asked: int = 4,
    batch: int = 10,
    size: int = 1,
) -> WorkloadJob:
    return WorkloadJob(
        name, at, "linear", batch, iterations, low, high, asked, gpus_per_replica=size
    )


def simulation(jobs: Sequence[WorkloadJob], **config: float) -> Simulation:
    # A 30 s restart, so the expected times below are round numbers.
    settings = {"gpus": 8, "gpus_per_node": 8, "interval_seconds": 60.0, "restart_seconds": 30.0}
    settings |= config
    return Simulation(workload=jobs, profiles=PROFILES, config=SimConfig(**settings))  # type: ignore[arg-type]


def find(sim: Simulation, name: str) -> ManagedJob:
    return next(job for job in sim.cluster.jobs() if job.name == name)


def scripted(
    sim: Simulation, plan: Plan, seen: list[dict[str, tuple[int, int]]] | None = None
) -> Callable[[datetime], None]:
    """A stand-in for the engine: at given virtual times, write given counts through the port."""

    def decide(now: datetime) -> None:
        if seen is not None:
            seen.append({job.name: (job.replicas, job.active) for job in sim.cluster.jobs()})
        for name, replicas in plan.get((now - ORIGIN).total_seconds(), {}).items():
            assert sim.cluster.scale(find(sim, name), replicas=replicas).written

    return decide


def run(sim: Simulation, plan: Plan | None = None) -> RunResult:
    return sim.run(decide_round=scripted(sim, plan or {}))


def by_name(result: RunResult) -> dict[str, object]:
    return {j.name: j for j in result.jobs}


def test_jobs_are_engine_owned_elastic_jobs_with_the_users_count() -> None:
    sim = simulation([job("a", at=30.0, asked=2, size=2, high=4)])
    listed: list[ManagedJob] = []
    sim.run(decide_round=lambda now: listed.extend(sim.cluster.jobs()))
    first = listed[0]
    assert first == ManagedJob(
        namespace="sim",
        name="a",
        min_replicas=1,
        max_replicas=4,
        replicas=2,
        active=2,
        owner=Owner.ENGINE,
        created=ORIGIN + timedelta(seconds=30),
        resources_per_replica={"nvidia.com/gpu": 2.0},
        max_restarts=None,
        total_samples=1000 * 10,  # declared: iterations x global batch
    )
    assert sim.cluster.capacity() == {"nvidia.com/gpu": 8.0}
    assert find(sim, "a").finished


def test_a_minimum_that_does_not_fit_waits_in_the_queue_and_later_jobs_backfill() -> None:
    sim = simulation(
        [
            job("big", asked=6, low=6, iterations=600),  # 8 GPUs: 6 it/s -> runs 0..100
            job("waits", at=1.0, asked=4, low=4, iterations=400),
            job("fits", at=2.0, asked=2, low=2, iterations=200),
        ]
    )
    result = run(sim)
    jobs = {j.name: j for j in result.jobs}
    assert jobs["big"].finish == pytest.approx(100.0)
    assert jobs["waits"].start == pytest.approx(100.0)  # until big frees its GPUs
    assert jobs["fits"].start == pytest.approx(2.0)  # backfilled at once
    queued = [e for e in result.events if e.reason == "Queued"]
    assert [(e.name, e.seconds) for e in queued] == [("waits", 1.0)]
    assert "its minimum (4 GPUs) does not fit" in queued[0].message


def test_pods_beyond_free_gpus_stay_pending_and_bind_later_with_a_restart() -> None:
    seen: list[dict[str, tuple[int, int]]] = []
    sim = simulation(
        [job("first", asked=6, iterations=600), job("second", asked=4, iterations=4000)]
    )
    result = sim.run(decide_round=scripted(sim, {}, seen))
    assert seen[0] == {"first": (6, 6), "second": (4, 2)}  # spec 4, 2 bound
    second = {j.name: j for j in result.jobs}["second"]
    # 2 it/s until first finishes at 100 (200 done), restart to 130, then 4 it/s: 3800 / 4
    assert second.finish == pytest.approx(130.0 + 3800 / 4)
    assert second.rescales == 1


def test_lowering_the_spec_frees_gpus_for_the_queue_at_the_same_instant() -> None:
    sim = simulation(
        [
            job("wide", asked=8, iterations=100_000),
            job("narrow", at=1.0, low=4, asked=4, iterations=400),
        ]
    )
    result = run(sim, {60.0: {"wide": 4}})
    jobs = {j.name: j for j in result.jobs}
    assert jobs["narrow"].start == pytest.approx(60.0)
    assert jobs["narrow"].finish == pytest.approx(160.0)
    assert jobs["wide"].rescales == 1


def test_jobs_that_can_never_run_are_rejected_and_reported() -> None:
    sim = simulation(
        [
            job("too-big", low=9, asked=9, high=9),
            job("pod-too-big", size=16, asked=1, high=1),
            job("never-fits", batch=20, low=1, asked=1),  # batch 20 does not fit on 1 GPU
            job("fine", iterations=40),
        ]
    )
    result = run(sim)
    assert set(result.rejected) == {"too-big", "pod-too-big", "never-fits"}
    reasons = {e.name: e.message for e in result.events if e.reason == "Rejected"}
    assert reasons == {
        "too-big": "can never run: its minimum needs 9 GPUs, the cluster has 8",
        "pod-too-big": "can never run: a worker needs 16 GPUs, a node has 8",
        "never-fits": "can never run: profile 'linear' cannot run batch 20 on 1 worker(s)",
    }
    assert all(e.warning for e in result.events if e.reason == "Rejected")
    assert [j.name for j in sim.cluster.jobs()] == ["fine"]
    assert result.finished == 1


def test_a_pod_needs_its_gpus_on_one_node() -> None:
    seen: list[dict[str, tuple[int, int]]] = []
    sim = simulation([job("a", asked=3, size=4, high=3, iterations=10)], gpus=12, gpus_per_node=6)
    sim.run(decide_round=scripted(sim, {}, seen))
    assert seen[0] == {"a": (3, 2)}  # 12 GPUs, but a 6-GPU node holds one 4-GPU pod


def test_scale_writes_only_a_current_spec_within_bounds() -> None:
    outcomes: list[tuple[bool, int, str]] = []

    def decide(now: datetime) -> None:
        if now != ORIGIN:
            return
        current = find(sim, "a")
        stale = ManagedJob(**{**current.__dict__, "replicas": 3})
        for target, replicas in ((stale, 5), (current, 9), (current, 4), (current, 2)):
            result = sim.cluster.scale(target, replicas=replicas)
            outcomes.append((result.written, result.replicas, result.error))

    sim = simulation([job("a", asked=4)])
    sim.run(decide_round=decide)
    assert outcomes == [
        (False, 4, "conflict: spec is 4, not 3"),
        (False, 4, "9 is outside [1, 8]"),
        (False, 4, ""),
        (True, 2, ""),
    ]
    assert sim.cluster.writes == 1
    done = find(sim, "a")
    assert sim.cluster.scale(done, replicas=3).error == "the job has finished"
    ghost = ManagedJob(**{**done.__dict__, "name": "ghost"})
    assert sim.cluster.scale(ghost, replicas=3).error == "ghost: not found"


def test_state_and_events_are_kept_per_job() -> None:
    def decide(now: datetime) -> None:
        current = find(sim, "a")
        sim.cluster.save_state(current, state=f'{{"round": "{now.isoformat()}"}}')
        sim.cluster.event(current, reason="Kept", message="nothing to do")

    sim = simulation([job("a", iterations=400)])
    result = sim.run(decide_round=decide)
    assert find(sim, "a").state == '{"round": "2025-01-01T00:01:00+00:00"}'
    engine_events = [(e.seconds, e.reason, e.source) for e in result.events if e.source == "engine"]
    assert engine_events == [(0.0, "Kept", "engine"), (60.0, "Kept", "engine")]


def test_throughput_is_samples_per_second_while_training_else_none() -> None:
    readings: list[object] = []

    def decide(now: datetime) -> None:
        jobs = sim.cluster.jobs()
        readings.append(dict(sim.throughput.read(jobs, now=now)))
        if now == ORIGIN + timedelta(seconds=60):
            assert sim.cluster.scale(find(sim, "a"), replicas=8).written
            readings.append(dict(sim.throughput.read(sim.cluster.jobs(), now=now)))

    sim = simulation(
        [job("a", asked=4, iterations=2000), job("b", low=8, asked=8, high=8, iterations=8)],
        interval_seconds=20.0,
    )
    sim.run(decide_round=decide)
    key_a, key_b = ("sim", "a"), ("sim", "b")
    assert readings[0] == {key_a: 40.0, key_b: None}  # b's minimum is queued
    assert readings[3] == {key_a: 40.0, key_b: None}  # t=60, before the write
    assert readings[4] == {key_a: 40.0, key_b: None}  # new pods bind after the round
    assert readings[5] == {key_a: None, key_b: None}  # t=80: restarting until 90
    assert readings[6] == {key_a: 80.0, key_b: None}  # t=100: 8 GPUs, 10 samples each


def test_noise_is_reproducible_and_relative() -> None:
    def readings(seed: int) -> list[float | None]:
        values: list[float | None] = []
        sim = simulation([job("a", iterations=4000)], noise=0.1, seed=seed)
        sim.run(
            decide_round=lambda now: values.append(
                sim.throughput.read(sim.cluster.jobs(), now=now)[("sim", "a")]
            )
        )
        return values

    first, again, other = readings(1), readings(1), readings(2)
    assert first == again
    assert first != other
    assert all(value is not None and 20.0 < value < 60.0 for value in first)


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (False, None),
        # samples/s = 10 x GPUs at batch 10; counts from the job's minimum to its maximum
        (True, {n: 10.0 * n for n in range(2, 7)}),
    ],
)
def test_a_job_declares_its_profile_when_the_simulation_says_so(
    declared: bool, expected: dict[int, float] | None
) -> None:
    sim = simulation([job("a", low=2, high=6)], declared_profiles=declared)  # type: ignore[arg-type]
    listed: list[ManagedJob] = []
    sim.run(decide_round=lambda now: listed.extend(sim.cluster.jobs()))
    assert listed[0].throughput_profile == expected
