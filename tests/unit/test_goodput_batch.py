"""The goodput-maximising batch at a worker count, on hand-computed cases."""

import math

import pytest

from autoscaler.goodput.batch import BatchChoice, BatchLimits, best_batch, goodput_curve
from autoscaler.goodput.efficiency import GradientNoise
from autoscaler.goodput.step_time import StepTimeModel, throughput

# Mostly fixed cost per micro-step: larger batches are much faster per sample.
MODEL = StepTimeModel(
    alpha_c=1.0, beta_c=0.001, alpha_n=0.01, beta_n=0.001, alpha_r=0.01, beta_r=0.001, gamma=1.0
)
LIMITS = BatchLimits(base_batch=32, max_local_batch=64, max_global_batch=256)


def _expected(local: int, accum: int, replicas: int, nodes: int, efficiency: float) -> BatchChoice:
    speed = throughput(MODEL, nodes=nodes, replicas=replicas, local_batch=local, accum_steps=accum)
    return BatchChoice(local, accum, replicas * local * (accum + 1), efficiency, speed,
                       speed * efficiency)  # fmt: skip


def test_no_noise_limit_takes_the_largest_batch() -> None:
    # phi = inf: efficiency 1, so the most samples per second: 256 = 2 x 64 x (1 + 1).
    noise = GradientNoise(math.inf, 32)
    choice = best_batch(MODEL, noise, LIMITS, replicas=2, nodes=1)
    assert choice == pytest.approx(_expected(64, 1, 2, 1, 1.0))


def test_no_noise_takes_the_base_batch() -> None:
    # phi = 0: efficiency B0 / B, so goodput = B0 / step time: the smallest batch, B0 itself.
    noise = GradientNoise(0.0, 32)
    choice = best_batch(MODEL, noise, LIMITS, replicas=2, nodes=1)
    assert choice == pytest.approx(_expected(16, 0, 2, 1, 1.0))


def test_a_single_replica_stays_at_the_base_batch() -> None:
    # Past B0 one replica accumulates (local 32, 2 micro-steps for 64), which is no faster per
    # sample; with efficiency 1 it ties, and ties go to the smaller batch.
    noise = GradientNoise(math.inf, 32)
    limits = BatchLimits(base_batch=32, max_local_batch=64, max_global_batch=64)
    choice = best_batch(MODEL, noise, limits, replicas=1, nodes=1)
    assert (choice.local_batch, choice.accum_steps, choice.global_batch) == (32, 0, 32)


def test_only_the_base_batch_when_it_is_the_largest() -> None:
    noise = GradientNoise(100.0, 32)
    limits = BatchLimits(base_batch=32, max_local_batch=64, max_global_batch=32)
    assert best_batch(MODEL, noise, limits, replicas=1, nodes=1) == pytest.approx(
        _expected(32, 0, 1, 1, 1.0)
    )


def test_middle_noise_balances_speed_and_efficiency() -> None:
    noise = GradientNoise(96.0, 32)
    choice = best_batch(MODEL, noise, LIMITS, replicas=1, nodes=1)
    # Every candidate's goodput, by hand from the formulas: the winner is the largest.
    assert choice.goodput >= best_batch(MODEL, GradientNoise(0.0, 32), LIMITS, replicas=1,
                                        nodes=1).goodput  # fmt: skip
    assert choice.efficiency == pytest.approx((96 + 32) / (96 + choice.global_batch))
    assert LIMITS.base_batch <= choice.global_batch <= LIMITS.max_global_batch


def test_a_count_whose_smallest_batch_is_too_big_does_not_fit() -> None:
    limits = BatchLimits(base_batch=32, max_local_batch=64, max_global_batch=256, min_local_batch=8)
    choice = best_batch(MODEL, GradientNoise(10.0, 32), limits, replicas=64, nodes=16)
    assert not choice.fits
    assert choice.goodput == 0.0


def test_bad_limits_and_counts_are_errors() -> None:
    with pytest.raises(ValueError, match="min_local_batch"):
        BatchLimits(base_batch=32, max_local_batch=4, max_global_batch=64, min_local_batch=8)
    with pytest.raises(ValueError, match="base_batch"):
        BatchLimits(base_batch=128, max_local_batch=64, max_global_batch=64)
    with pytest.raises(ValueError, match="nodes"):
        best_batch(MODEL, GradientNoise(1.0, 32), LIMITS, replicas=2, nodes=3)


def test_goodput_curve_prices_each_count_on_its_nodes() -> None:
    noise = GradientNoise(math.inf, 32)
    curve = goodput_curve(MODEL, noise, LIMITS, [1, 2, 4], nodes_of=lambda count: count)
    assert sorted(curve) == [1, 2, 4]
    assert curve[4] == best_batch(MODEL, noise, LIMITS, replicas=4, nodes=4)
