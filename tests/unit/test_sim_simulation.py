"""The discrete-event loop: exact progress, restart stalls, rounds, metrics, lower bounds, engine."""

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.engine.config import EngineConfig
from autoscaler.engine.engine import Engine
from autoscaler.policies import registry
from autoscaler.sim.bundled import DEFAULT_CONFIG, bundled_profiles, bundled_workload
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.results import JobResult, RunResult, best_rate, lower_bound, percentile
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.workload import WorkloadJob

ORIGIN = datetime(2025, 1, 1, tzinfo=UTC)
PROFILES = {
    "linear": Profile(
        name="linear",
        gpu_counts=(1, 2, 4, 8, 16),
        rows=(ProfileRow(10, (1.0, 2.0, 4.0, 8.0, 16.0)),),
    ),
    "peaks": Profile(  # best at 4 GPUs, worse beyond
        name="peaks", gpu_counts=(1, 2, 4, 8), rows=(ProfileRow(10, (1.0, 1.5, 2.0, 1.0)),)
    ),
}


def job(
    name: str,
    *,
    at: float = 0.0,
    iterations: int = 1000,
    low: int = 1,
    high: int = 8,
    asked: int = 4,
    profile: str = "linear",
) -> WorkloadJob:
    return WorkloadJob(name, at, profile, 10, iterations, low, high, asked)


def run(
    jobs: list[WorkloadJob], plan: dict[float, dict[str, int]] | None = None, **config: float
) -> tuple[list[float], RunResult]:
    # A 30 s restart, so the expected times below are round numbers.
    settings = {"gpus": 16, "interval_seconds": 60.0, "restart_seconds": 30.0, **config}
    sim = Simulation(workload=jobs, profiles=PROFILES, config=SimConfig(**settings))  # type: ignore[arg-type]
    rounds: list[float] = []

    def decide(now: datetime) -> None:
        seconds = (now - ORIGIN).total_seconds()
        rounds.append(seconds)
        for name, replicas in (plan or {}).get(seconds, {}).items():
            current = next(j for j in sim.cluster.jobs() if j.name == name)
            assert sim.cluster.scale(current, replicas=replicas).written

    result = sim.run(decide_round=decide)
    return rounds, result


def only(result: RunResult) -> JobResult:
    (single,) = result.jobs
    return single


def test_a_job_at_a_fixed_count_finishes_at_iterations_over_rate() -> None:
    _, result = run([job("a", at=10.0, asked=4, iterations=1000)])
    a = only(result)
    assert a.start == 10.0
    assert a.finish == pytest.approx(10.0 + 1000 / 4.0)
    assert a.jct == pytest.approx(250.0)
    assert a.rescales == 0
    assert a.gpu_seconds == pytest.approx(1000.0)  # 4 GPUs x 250 s
    assert a.busy_gpu_seconds == pytest.approx(1000.0)


def test_each_rescale_adds_exactly_the_restart_delay() -> None:
    # 4 it/s to 60 (240 done), restart to 90, 8 it/s to 120 (480), restart to 150, 4 it/s: 520/4
    _, result = run([job("a", iterations=1000)], {60.0: {"a": 8}, 120.0: {"a": 4}})
    a = only(result)
    assert a.finish == pytest.approx(150.0 + 520 / 4)
    assert a.rescales == 2
    assert a.gpu_seconds == pytest.approx(4 * 60 + 8 * 60 + 4 * 160)
    assert a.busy_gpu_seconds == pytest.approx(4 * 60 + 8 * 30 + 4 * 130)
    # equivalently: iterations / rate + the two restarts, for the same time at each rate
    assert a.finish == pytest.approx(240 / 4 + 240 / 8 + 520 / 4 + 2 * 30)


def test_a_rescale_during_a_restart_starts_the_stall_again() -> None:
    _, result = run(
        [job("a", iterations=1000)], {60.0: {"a": 8}, 70.0: {"a": 6}}, interval_seconds=10.0
    )
    a = only(result)
    assert a.finish == pytest.approx(70.0 + 30.0 + (1000 - 240) / 6.0)
    assert a.rescales == 2


def test_restart_seconds_is_configurable() -> None:
    _, result = run([job("a", iterations=1000)], {60.0: {"a": 8}}, restart_seconds=8.0)
    assert only(result).finish == pytest.approx(68.0 + 760 / 8)


@pytest.mark.parametrize(
    ("marked", "every", "stall"),
    [(False, False, 30.0), (True, False, 2.0), (False, True, 2.0)],
    ids=["torchrun", "torchft-marked", "torchft-all"],
)
def test_a_torchft_jobs_resize_pauses_it_for_the_torchft_stall(
    marked: bool, every: bool, stall: float
) -> None:
    spec = replace(job("a", iterations=1000), torchft=marked)
    _, result = run([spec], {60.0: {"a": 8}}, torchft=every, torchft_pause_seconds=2.0)  # type: ignore[arg-type]
    assert only(result).finish == pytest.approx(60.0 + stall + 760 / 8)


def test_rounds_run_on_the_interval_grid_only_while_jobs_are_live() -> None:
    rounds, _ = run([job("a", at=1000.0, iterations=400), job("b", at=5000.0, iterations=400)])
    assert rounds == [1020.0, 1080.0, 5040.0]  # b ends at 5100


def test_the_horizon_stops_a_run_and_reports_what_is_left() -> None:
    _, result = run([job("a", iterations=10**9)], horizon_seconds=3600.0)
    assert result.unfinished == ("a",)
    assert result.makespan == 3600.0
    assert result.mean_jct is None


def test_run_metrics() -> None:
    _, result = run(
        [job("a", asked=8, iterations=800), job("b", at=50.0, asked=8, iterations=1600)]
    )
    assert [j.jct for j in result.jobs] == [pytest.approx(100.0), pytest.approx(200.0)]
    assert result.mean_jct == pytest.approx(150.0)
    assert result.p95_jct == pytest.approx(200.0)
    assert result.makespan == pytest.approx(250.0)
    assert result.gpu_utilisation == pytest.approx((8 * 100 + 8 * 200) / (16 * 250))
    assert result.rescales == 0
    assert result.finished == 2


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 95) == 19.0
    assert percentile(values, 100) == 20.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 95) is None
    # 7 % of 100 is 7.000000000000001 in floats: still the 7th value, not the 8th
    assert percentile([float(v) for v in range(1, 101)], 7) == 7.0


def test_the_lower_bound_is_the_best_allowed_count_alone_without_restarts() -> None:
    peaks = job("p", profile="peaks", iterations=100, low=1, high=8)
    assert best_rate(peaks, PROFILES["peaks"], total_gpus=64) == (4, 2.0)
    assert lower_bound(peaks, PROFILES["peaks"], total_gpus=64) == pytest.approx(50.0)
    narrow = job("n", profile="peaks", iterations=100, low=1, high=2)
    assert lower_bound(narrow, PROFILES["peaks"], total_gpus=64) == pytest.approx(100 / 1.5)
    wide = job("w", iterations=160, low=1, high=16)
    assert lower_bound(wide, PROFILES["linear"], total_gpus=8) == pytest.approx(
        20.0
    )  # capped by GPUs
    _, result = run([job("best", profile="peaks", iterations=100, asked=4)])
    assert only(result).jct == pytest.approx(only(result).lower_bound)


def test_a_programmatic_workload_is_checked_too() -> None:
    with pytest.raises(SimInputError, match=r"<workload job a>: unknown profile 'bert'"):
        Simulation(workload=[job("a", profile="bert")], profiles=PROFILES)
    with pytest.raises(SimInputError, match=r"<workload job a>: .* must be positive"):
        Simulation(workload=[job("a", iterations=0)], profiles=PROFILES)
    with pytest.raises(SimInputError, match="job names must be unique"):
        Simulation(workload=[job("a"), job("a", at=5.0)], profiles=PROFILES)


def test_a_run_happens_once() -> None:
    sim = Simulation(workload=[job("a", iterations=10)], profiles=PROFILES)
    sim.run(decide_round=lambda now: None)
    with pytest.raises(RuntimeError, match="runs once"):
        sim.run(decide_round=lambda now: None)


def test_the_bundled_default_runs_to_the_end_without_an_engine() -> None:
    profiles = bundled_profiles()
    started = time.perf_counter()
    sim = Simulation(workload=bundled_workload(profiles), profiles=profiles, config=DEFAULT_CONFIG)
    result = sim.run(decide_round=lambda now: None)
    assert time.perf_counter() - started < 2.0
    assert result.finished == 72
    assert result.rejected == ()
    assert all(
        j.jct is not None and j.lower_bound is not None and j.jct >= j.lower_bound - 1e-6
        for j in result.jobs
    )
    assert 0.0 < result.gpu_utilisation <= 1.0
    assert sim.cluster.at(result.end) == DEFAULT_CONFIG.origin + timedelta(seconds=result.end)


@pytest.mark.parametrize("policy", ["static", "global-optimizer"])
def test_the_engine_drives_the_simulated_cluster(policy: str) -> None:
    jobs = [job(f"j{i}", at=120.0 * i, asked=1 + i % 4, iterations=20_000) for i in range(6)]
    sim = Simulation(workload=jobs, profiles=PROFILES, config=SimConfig(gpus=16))
    engine = Engine(
        cluster=sim.cluster,
        throughput=sim.throughput,
        policy=registry.build(registry.find(policy)),
        policy_name=policy,
        config=EngineConfig(interval_seconds=60.0),
    )
    try:
        result = sim.run(decide_round=lambda now: engine.run_once(now=now))
    finally:
        engine.close()
    assert result.finished == 6
    assert all(
        j.jct is not None and j.lower_bound is not None and j.jct >= j.lower_bound - 1e-6
        for j in result.jobs
    )
    if policy == "static":
        assert result.scale_writes == 0
