"""The comparison API: policies through the real engine, lower bounds, settings, progress, plots."""

import io
import math
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.policies.contract import reporting_of
from autoscaler.policies.objective import Objective
from autoscaler.policies.registry import PolicyError
from autoscaler.sim import DEFAULT_POLICIES, PolicyChoice, SimConfig, compare
from autoscaler.sim.bounds import least_gpu_seconds, workload_bound
from autoscaler.sim.bundled import bundled_profiles, bundled_workload
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.lineup import built, choose, lineup
from autoscaler.sim.plots import allocation, jct_cdf, utilisation, write_plots
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.progress import ProgressBar
from autoscaler.sim.settings import engine_config
from autoscaler.sim.workload import WorkloadJob

PROFILES = {
    # iterations/s by GPUs; per GPU best at 1 (1.0), batch 20 cannot run on 1 GPU
    "toy": Profile(
        name="toy",
        gpu_counts=(1, 2, 4, 8),
        rows=(ProfileRow(10, (1.0, 1.8, 3.2, 5.0)), ProfileRow(20, (0.0, 1.0, 1.8, 3.2))),
    )
}
CONFIG = SimConfig(gpus=8, gpus_per_node=4)


def job(name: str, at: float, iterations: int, *, asked: int = 1, batch: int = 10) -> WorkloadJob:
    return WorkloadJob(name, at, "toy", batch, iterations, 1, 8, asked)


JOBS = [job("a", 0, 3000), job("b", 30, 6000, asked=2), job("c", 90, 1500), job("d", 400, 4500)]


def test_every_policy_runs_on_the_same_jobs_and_no_figure_beats_its_bound() -> None:
    comparison = compare(workload=JOBS, profiles=PROFILES, config=CONFIG)
    assert list(comparison.runs) == list(DEFAULT_POLICIES)
    bound = comparison.lower_bound
    for name, run in comparison.runs.items():
        result = run.result
        assert result.finished == 4, name
        assert result.mean_jct is not None
        assert bound.mean_jct is not None
        ratios = comparison.ratios(name)
        assert all(r is not None and r >= 1 - 1e-9 for r in ratios.values()), (name, ratios)
        assert run.mean_solve_seconds is not None
        assert run.mean_solve_seconds >= 0
        assert run.fallbacks == 0
        assert len(run.solve_seconds) > 0
    assert comparison.runs["static"].result.rescales == 0
    assert comparison.rejected == ()


def test_lower_bounds_by_hand() -> None:
    # alone: 8 GPUs at 5 it/s; least GPU-time at 1 GPU (1 it/s per GPU)
    bound = workload_bound(JOBS, PROFILES, total_gpus=8)
    assert bound.jobs == {"a": 600.0, "b": 1200.0, "c": 300.0, "d": 900.0}
    assert bound.mean_jct == pytest.approx(750.0)
    assert bound.p95_jct == 1200.0
    # work: 15000 GPU-s / 8 = 1875 s from 0; alone: b ends at 30 + 1200 = 1230
    assert bound.makespan == pytest.approx(1875.0)
    assert least_gpu_seconds(JOBS[0], PROFILES["toy"], total_gpus=8) == pytest.approx(3000.0)
    # a late burst: the jobs arriving at 1000 still need 2 x 8000 / 8 = 2000 s after it
    late = [job("x", 0, 100), job("y", 1000, 8000), job("z", 1000, 8000)]
    assert workload_bound(late, PROFILES, total_gpus=8).makespan == pytest.approx(3000.0)
    rejected = workload_bound(late, PROFILES, total_gpus=8, rejected={"y", "z"})
    assert rejected.jobs == {"x": 20.0}
    assert rejected.makespan == pytest.approx(20.0)


def test_a_job_that_never_fits_is_reported_not_dropped() -> None:
    jobs = [*JOBS, WorkloadJob("never", 5, "toy", 20, 100, 1, 1, 1)]
    comparison = compare(workload=jobs, profiles=PROFILES, policies=["static"], config=CONFIG)
    assert comparison.rejected == (("never", "profile 'toy' cannot run batch 20 on 1 worker(s)"),)
    assert "never" not in comparison.lower_bound.jobs
    assert "can never run (not simulated): never:" in comparison.table()
    assert comparison.to_json()["rejected"] == [
        {"name": "never", "reason": "profile 'toy' cannot run batch 20 on 1 worker(s)"}
    ]


def test_processes_give_the_same_figures_and_report_progress() -> None:
    calls: list[tuple[int, int, str]] = []
    policies = ["static", "global-optimizer"]
    alone = compare(workload=JOBS, profiles=PROFILES, policies=policies, config=CONFIG)
    together = compare(
        workload=JOBS,
        profiles=PROFILES,
        policies=policies,
        config=CONFIG,
        workers=2,
        progress=lambda *call: calls.append(call),
    )
    for name in policies:
        assert together.runs[name].result.jobs == alone.runs[name].result.jobs
    assert calls[-1] == (8, 8, "2/2 policies done")
    assert all(done <= total for done, total, _ in calls)


def test_progress_in_turn_counts_jobs_across_policies() -> None:
    calls: list[tuple[int, int, str]] = []
    compare(
        workload=JOBS,
        profiles=PROFILES,
        policies=["static", "equal-share"],
        config=CONFIG,
        progress=lambda *call: calls.append(call),
    )
    assert calls[-1] == (8, 8, "equal-share (2/2)")
    assert [done for done, _, _ in calls] == sorted(done for done, _, _ in calls)


def test_named_configurations_and_the_lineup() -> None:
    pollux = choose("pollux-style")
    assert (pollux.plugin, pollux.config) == (
        "speedup-optimizer",
        {"objective": {"kind": "power-mean", "exponent": -1.0}, "restart_discount": "age"},
    )
    assert reporting_of(built(pollux)).objective == Objective(kind="power-mean", exponent=-1.0)
    assert choose("static") == PolicyChoice("static", "static")
    custom = PolicyChoice("fair", "global-optimizer", {"objective": {"kind": "proportional"}})
    assert lineup(["static", custom]) == (PolicyChoice("static", "static"), custom)
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        lineup(["nope"])
    with pytest.raises(PolicyError, match="listed twice: static"):
        lineup(["static", "static"])
    with pytest.raises(PolicyError, match="no policy"):
        lineup([])
    with pytest.raises(PolicyError, match="'broken'"):
        lineup([PolicyChoice("broken", "global-optimizer", {"objective": {"kind": "max"}})])


def test_engine_settings_follow_the_simulated_restart_and_interval() -> None:
    config = engine_config(
        SimConfig(restart_seconds=20.0, interval_seconds=40.0), policy="static", config={}
    )
    assert config.interval_seconds == 40.0
    assert config.restart_seconds == 20.0
    settle = config.settle
    assert settle.settle_seconds == settle.cooldown_seconds == 60.0
    assert settle.scale_down_stabilization_seconds == 60.0
    assert config.policy.name == "static"


def test_inputs_from_paths(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "toy.csv").write_text("global_batch_size,1,2\n10,1.0,1.5\n")
    workload = tmp_path / "w.csv"
    workload.write_text(
        "name,submit_time,profile,batch_size,iterations,min_replicas,max_replicas,replicas\n"
        "a,0,toy,10,100,1,2,1\n"
    )
    comparison = compare(
        workload=str(workload), profiles=profiles, policies=["static"], config=CONFIG
    )
    assert comparison.runs["static"].result.jobs[0].jct == pytest.approx(100.0)
    workload.write_text("name,time,application,num_replicas,batch_size\na,0,toy,1,10\n")
    with pytest.raises(SimInputError, match=r"w.csv:1: a Pollux workload needs"):
        compare(workload=workload, profiles=profiles, policies=["static"])


def test_the_timeline_follows_allocations() -> None:
    comparison = compare(workload=JOBS[:1], profiles=PROFILES, policies=["static"], config=CONFIG)
    timeline = comparison.runs["static"].result.timeline
    assert timeline[0].seconds == 0.0
    assert timeline[0].gpus == {"a": 1}
    assert timeline[0].training == 1
    assert timeline[-1].gpus == {}
    assert timeline[-1].seconds == pytest.approx(3000.0)


def test_plots_are_figures_and_pngs(tmp_path: Path) -> None:
    comparison = compare(
        workload=JOBS, profiles=PROFILES, policies=["static", "pollux-style"], config=CONFIG
    )
    assert len(allocation(comparison).axes) == 2
    assert jct_cdf(comparison).axes[0].get_legend() is not None
    assert utilisation(comparison).axes[0].get_ylim()[1] == pytest.approx(1.02)
    written = write_plots(comparison, tmp_path / "plots")
    assert [path.name for path in written] == ["jct-cdf.png", "allocation.png", "utilisation.png"]
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in written)


def test_the_progress_bar() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, width=10, tty=False)
    for done in range(0, 101, 5):
        bar(done, 100, "static")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 11  # a line per tenth
    assert lines[0] == "simulating [----------]   0%  static"
    assert lines[-1] == "simulating [##########] 100%  static"
    tty = io.StringIO()
    bar = ProgressBar(tty, width=4, tty=True, min_seconds=0.0)
    bar(1, 2, "x")
    bar(2, 2, "y")
    bar.close()
    assert tty.getvalue() == (
        "\rsimulating [##--]  50%  x\x1b[K\rsimulating [####] 100%  y\x1b[K\n"
    )


def test_the_bundled_default_is_the_api_default() -> None:
    profiles = bundled_profiles()
    jobs = bundled_workload(profiles)[:6]
    comparison = compare(workload=jobs, policies=["static"])
    assert comparison.config.gpus == 64
    assert len(comparison.workload) == 6
    assert math.isfinite(comparison.runs["static"].result.makespan)


def test_the_torchft_effect_is_the_default_policy_run_again_in_torchft_mode() -> None:
    policies = ["static", "global-optimizer"]
    plain = compare(workload=JOBS, profiles=PROFILES, policies=policies, config=CONFIG)
    assert plain.torchft is None
    assert plain.to_json()["torchft_effect"] is None
    both = compare(
        workload=JOBS, profiles=PROFILES, policies=policies, config=CONFIG, torchft_effect=True
    )
    assert both.torchft is not None
    assert both.torchft.name == "global-optimizer"
    every = compare(
        workload=JOBS,
        profiles=PROFILES,
        policies=["global-optimizer"],
        config=replace(CONFIG, torchft=True),
    )
    effect = both.to_json()["torchft_effect"]
    assert effect["mean_jct_seconds"] == every.runs["global-optimizer"].result.mean_jct  # type: ignore[index]
    assert "torchft mode, every job" in both.table()
