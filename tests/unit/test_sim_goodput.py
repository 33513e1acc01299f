"""Goodput in the simulator (`autoscaler.sim.goodput`), on Pollux's cifar10 traces as bundled with
the benchmark: values checked by hand against the CSV rows."""

import dataclasses
import math
from pathlib import Path

import pytest

from autoscaler.goodput.step_time import step_seconds
from autoscaler.sim import SimConfig, compare
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.goodput import (
    alone_seconds,
    goodput_workload,
    load_application,
    rates,
    split_rates,
)
from autoscaler.sim.lineup import PolicyChoice
from autoscaler.sim.pollux import load_pollux_profiles
from autoscaler.sim.workload import WorkloadJob

TRACES = Path(__file__).parents[2] / "benchmarks" / "data" / "pollux" / "traces"
CIFAR = load_application(TRACES / "cifar10")


def test_the_base_batch_and_the_work_come_from_the_smallest_validated_batch() -> None:
    assert CIFAR.base_batch == 128
    assert CIFAR.work == 39063.0  # progress at the end of epoch 100 in validation-128.csv
    assert CIFAR.epoch(0.0) == 0
    assert CIFAR.epoch(391.0) == 1  # the first epoch ends at progress 391
    assert CIFAR.epoch(CIFAR.work) == 99  # the last epoch, never past it


def test_gradient_statistics_are_interpolated_between_validated_batches() -> None:
    sqr_128, var_128 = 8.947307535897329, 5.066593295150894  # epoch 1 of validation-128.csv
    sqr_256, var_256 = 17.379458169870425, 13.937760473946334  # ... of validation-256.csv
    sqr, var = CIFAR.gradient(192, 0)
    assert sqr == pytest.approx((sqr_128 + sqr_256) / 2)
    assert var == pytest.approx((var_128 + var_256) / 2)
    assert CIFAR.noise(128, 0).phi == pytest.approx(128 * var_128 / sqr_128)


def test_a_step_at_the_base_batch_makes_one_iteration_of_progress() -> None:
    assert CIFAR.gain(128, 0) == pytest.approx(1.0)
    sqr, var = CIFAR.gradient(512, 10)
    assert CIFAR.gain(512, 10) == pytest.approx((var + sqr) / (var / 4 + sqr))


def test_fixed_rate_uses_the_measured_step_time() -> None:
    # placements.csv, placement 1: local 91 -> 0.07591 s, 129 -> 0.10385 s; 128 is interpolated.
    step = 0.07591350078582763 + (0.10385050773620605 - 0.07591350078582763) * 37 / 38
    assert CIFAR.fixed_rate(128, 1, 0) == pytest.approx(1 / step)


def test_adapting_beats_the_fixed_base_batch_once_noise_has_grown() -> None:
    late = CIFAR.epoch(CIFAR.work)
    assert CIFAR.adaptive_rate(16, late) > CIFAR.fixed_rate(128, 16, late)


def _jobs() -> tuple[WorkloadJob, ...]:
    return (
        WorkloadJob("cifar10-a", 0.0, "cifar10", 2048, 1, 1, 16, 4, gpus_per_replica=1),
        WorkloadJob("cifar10-b", 60.0, "cifar10", 512, 1, 1, 16, 2, gpus_per_replica=1),
    )


def test_a_goodput_workload_is_in_iterations_at_the_base_batch() -> None:
    profiles = load_pollux_profiles(TRACES)
    converted = goodput_workload(_jobs(), profiles)
    assert [job.batch_size for job in converted.jobs] == [128, 128]
    assert [job.iterations for job in converted.jobs] == [39063, 39063]
    assert converted.batches == {"cifar10-a": 2048, "cifar10-b": 512}
    best = converted.profiles["cifar10"]
    # The bound's profile is at least every epoch's rate, so its bounds stay lower bounds.
    for epoch in (0, 50, 99):
        assert best.throughput(128, 8, 1) >= CIFAR.adaptive_rate(8, epoch) - 1e-9
        assert best.throughput(128, 8, 1) >= CIFAR.fixed_rate(2048, 8, epoch) - 1e-9


def test_a_simulated_run_finishes_every_job_above_its_bounds() -> None:
    """The LP bound, the comparison's bound of each job alone (goodput's, epoch by epoch, over
    both batches) and each run's own (at the batch it runs at) hold every JCT."""
    config = SimConfig(gpus=16, gpus_per_node=4, restart_seconds=30.0, goodput=True)
    comparison = compare(
        workload=_jobs(),
        profiles=load_pollux_profiles(TRACES),
        config=config,
        policies=["static", PolicyChoice("static-fixed", "static", adapts_batch=False)],
    )
    workload = goodput_workload(_jobs(), load_pollux_profiles(TRACES))
    assert comparison.lower_bound.jobs == pytest.approx(workload.alone_seconds(total_gpus=16))
    for run in comparison.runs.values():
        assert all(job.status == "finished" for job in run.result.jobs)
        assert (run.result.mean_jct or math.inf) >= (comparison.lp_bound.mean_jct or 0.0)
        for job in run.result.jobs:
            assert job.lower_bound is not None
            assert job.jct is not None
            assert comparison.lower_bound.jobs[job.name] <= job.lower_bound <= job.jct
    adaptive, fixed = (comparison.runs[n].result.mean_jct for n in ("static", "static-fixed"))
    assert adaptive != fixed


def test_a_job_alone_is_bounded_epoch_by_epoch_at_the_best_rate_so_far() -> None:
    """By hand: each epoch's work over the best rate of any count and batch in it or before."""
    job = dataclasses.replace(_jobs()[0], min_replicas=2, max_replicas=8)
    best, expected, start = 0.0, 0.0, 0.0
    for epoch, end in enumerate(CIFAR.epoch_ends):
        for batch in (None, 2048):
            best = max(best, *rates(CIFAR, epoch, 8, batch)[2:])
        expected += (end - start) / best
        start = end
    found = alone_seconds(CIFAR, job, batches=(None, 2048), total_gpus=64)
    assert found == pytest.approx(expected)
    # Tighter than the profile of the best rate over all epochs, and capped by the cluster.
    profile = goodput_workload(_jobs(), load_pollux_profiles(TRACES)).profiles["cifar10"]
    assert found > CIFAR.work / profile.throughput(128, 8, 1)
    assert alone_seconds(CIFAR, job, batches=(None,), total_gpus=4) > found
    assert alone_seconds(CIFAR, job, batches=(None,), total_gpus=1) is None


def test_goodput_needs_pollux_traces() -> None:
    with pytest.raises(SimInputError, match="Pollux traces"):
        compare(config=dataclasses.replace(SimConfig(), goodput=True), policies=["static"])


def test_optimus_is_priced_by_its_jobs_true_rates_with_goodput_only() -> None:
    """Optimus+Oracle as Pollux's paper ran it: the engine trusts each job's declared true rates
    (no exploration past the counts it ran at), so it sizes the jobs differently from the same
    allocator learning its curves; without goodput `optimus` learns as every policy does."""
    learning = PolicyChoice("optimus-learning", "optimus", adapts_batch=False)
    policies = ["optimus", learning]
    config = SimConfig(gpus=16, gpus_per_node=4, restart_seconds=30.0, goodput=True)
    profiles = load_pollux_profiles(TRACES)
    runs = compare(workload=_jobs(), profiles=profiles, config=config, policies=policies).runs
    assert (runs["optimus"].model, runs["optimus-learning"].model) == ("oracle", "exploring")
    oracle, learned = (runs[n].result for n in ("optimus", "optimus-learning"))
    assert oracle.mean_jct != learned.mean_jct
    assert oracle.rescales < learned.rescales  # it goes to a count at once, no stepping up
    without = dataclasses.replace(config, goodput=False)
    jobs = [dataclasses.replace(job, iterations=20_000) for job in _jobs()]
    profiles = {"cifar10": profiles["cifar10"]}
    runs = compare(workload=jobs, profiles=profiles, config=without, policies=policies).runs
    assert runs["optimus"].model == "exploring"
    oracle, learned = (runs[n].result for n in ("optimus", "optimus-learning"))
    assert (oracle.mean_jct, oracle.rescales) == (learned.mean_jct, learned.rescales)
    assert learned.rescales > 2  # it stepped up as it learned


@pytest.mark.parametrize(
    ("gpus", "crosses"),
    [(1, False), (2, True), (4, True), (5, False), (16, False)],
    ids=["one-gpu", "two-in-a-node", "a-full-node", "packed-on-two-nodes", "packed-on-four"],
)
def test_only_a_count_that_fits_one_node_is_slowed_on_several(gpus: int, crosses: bool) -> None:
    """Pollux's step-time model tells one node from several, not two nodes from three."""
    for batch in (2048, None):
        slowdown = CIFAR.split_slowdown(gpus, 0, batch)
        assert slowdown > 1.0 if crosses else slowdown == 1.0
        packed, split = rates(CIFAR, 0, 16, batch), split_rates(CIFAR, 0, 16, batch)
        assert split[gpus] == pytest.approx(packed[gpus] / slowdown)


def test_crossing_nodes_costs_what_the_fitted_model_says() -> None:
    # 2048 on 4 GPUs: a local batch of 512, accumulated over micro-steps of the largest measured.
    accum = max(math.ceil(512 / CIFAR.limits.max_local_batch) - 1, 0)
    local = math.ceil(512 / (accum + 1))
    times = [
        step_seconds(CIFAR.model, nodes=n, replicas=4, local_batch=local, accum_steps=accum)
        for n in (1, 2)
    ]
    assert CIFAR.split_slowdown(4, 0, 2048) == pytest.approx(times[1] / times[0])


def _one_job(replicas: int) -> list[WorkloadJob]:
    return [WorkloadJob("cifar10-a", 0.0, "cifar10", 512, 1, replicas, replicas, replicas)]


@pytest.mark.parametrize("charged", [False, True], ids=["packed-rates", "placement-rates"])
def test_a_job_forced_across_nodes_is_slower_only_when_placement_is_charged(
    charged: bool,
) -> None:
    """Two 1-GPU nodes: a 2-worker job must cross them; on one 2-GPU node it need not."""
    jcts = []
    for per_node in (2, 1):
        config = SimConfig(gpus=2, gpus_per_node=per_node, goodput=True, placement_rates=charged)
        comparison = compare(
            workload=_one_job(2),
            profiles=load_pollux_profiles(TRACES),
            config=config,
            policies=["static"],
        )
        jcts.append(comparison.runs["static"].result.mean_jct or math.inf)
    together, apart = jcts
    assert apart > together * 1.05 if charged else apart == pytest.approx(together)
