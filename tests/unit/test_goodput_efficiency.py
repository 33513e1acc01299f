"""Statistical efficiency, gain, learning-rate rules and the gradient-statistics estimator, on
hand-computed values."""

import math

import pytest

from autoscaler.goodput.efficiency import (
    GradientNoise,
    GradientStatsEstimator,
    efficiency,
    gain,
    noise_scale,
)
from autoscaler.goodput.learning_rate import lr_factor


@pytest.mark.parametrize(
    ("grad_sqr", "grad_var", "base", "expected"),
    [
        (2.0, 6.0, 32, 96.0),  # 32 * 6 / 2
        (1.0, 0.0, 32, 0.0),
        (1.0, -1.0, 32, 0.0),  # a negative variance estimate is no noise
        (0.0, 1.0, 32, math.inf),
        (0.0, 0.0, 32, 0.0),
    ],
)
def test_noise_scale(grad_sqr: float, grad_var: float, base: int, expected: float) -> None:
    assert noise_scale(grad_sqr, grad_var, base) == pytest.approx(expected)


NOISE = GradientNoise(phi=96.0, base_batch=32)  # grad_sqr 2, grad_var 6 at B0 = 32


@pytest.mark.parametrize(
    ("batch", "expected_efficiency", "expected_gain"),
    [
        (32, 1.0, 1.0),
        (128, 128 / 224, 4 * 128 / 224),  # (96 + 32) / (96 + 128); (6 + 2) / (6 / 4 + 2)
        (96, 128 / 192, 3 * 128 / 192),
    ],
)
def test_efficiency_and_gain(batch: int, expected_efficiency: float, expected_gain: float) -> None:
    assert efficiency(NOISE, batch) == pytest.approx(expected_efficiency)
    assert gain(NOISE, batch) == pytest.approx(expected_gain)
    assert gain(NOISE, batch) == pytest.approx((6 + 2) / (6 / (batch / 32) + 2))


def test_infinite_noise_is_perfectly_efficient() -> None:
    noise = GradientNoise(phi=math.inf, base_batch=32)
    assert efficiency(noise, 512) == 1.0
    assert gain(noise, 512) == 16.0


def test_bad_noise_and_batch_are_errors() -> None:
    with pytest.raises(ValueError, match="phi"):
        GradientNoise(phi=-1.0, base_batch=32)
    with pytest.raises(ValueError, match="base_batch"):
        GradientNoise(phi=1.0, base_batch=0)
    with pytest.raises(ValueError, match="batch"):
        efficiency(NOISE, 0)


@pytest.mark.parametrize(
    ("rule", "expected"), [("adascale", 4 * 128 / 224), ("sqrt", 2.0), ("linear", 4.0)]
)
def test_lr_factor(rule: str, expected: float) -> None:
    assert lr_factor(rule, NOISE, 128) == pytest.approx(expected)  # type: ignore[arg-type]


def test_unknown_lr_rule() -> None:
    with pytest.raises(ValueError, match="unknown learning-rate rule"):
        lr_factor("cubic", NOISE, 128)  # type: ignore[arg-type]


def test_one_step_gives_the_unbiased_estimates() -> None:
    estimator = GradientStatsEstimator()
    assert not estimator.ready
    estimator.update(local_sqr=10.0, total_sqr=4.0, count=4, scale=2.0)
    assert estimator.grad_sqr == pytest.approx(2.0)  # (4 * 4 - 10) / 3
    assert estimator.grad_var == pytest.approx(4.0)  # (10 - 4) * 2 / 3
    assert estimator.noise(32).phi == pytest.approx(64.0)


def test_steps_are_smoothed_with_bias_correction() -> None:
    estimator = GradientStatsEstimator()
    estimator.update(local_sqr=10.0, total_sqr=4.0, count=4, scale=2.0)  # sqr 2, var 4
    estimator.update(local_sqr=10.0, total_sqr=7.0, count=4, scale=1.0)  # sqr 6, var 1
    first, second = 0.999**2, 0.999
    weight_first = second * (1 - first)
    weight_second = 1 - second
    total = weight_first + weight_second
    assert estimator.grad_sqr == pytest.approx((weight_first * 2 + weight_second * 6) / total)
    assert estimator.grad_var == pytest.approx((weight_first * 4 + weight_second * 1) / total)


def test_one_gradient_uses_the_difference_with_the_previous_one() -> None:
    estimator = GradientStatsEstimator()
    estimator.update_differenced(previous_sqr=5.0, current_sqr=3.0, average_sqr=3.0, scale=1.0)
    # local 4, total 3, c = 2 at scale 2
    assert estimator.grad_sqr == pytest.approx(2.0)
    assert estimator.grad_var == pytest.approx(2.0)
    estimator.update(local_sqr=10.0, total_sqr=4.0, count=4, scale=2.0)
    assert (estimator.grad_sqr, estimator.grad_var) == pytest.approx((2.0, 4.0))  # restarted


def test_estimator_state_round_trips() -> None:
    estimator = GradientStatsEstimator()
    estimator.update(local_sqr=10.0, total_sqr=4.0, count=4, scale=2.0)
    resumed = GradientStatsEstimator.from_state(estimator.state())
    resumed.update(local_sqr=10.0, total_sqr=7.0, count=4, scale=1.0)
    estimator.update(local_sqr=10.0, total_sqr=7.0, count=4, scale=1.0)
    assert resumed.grad_sqr == estimator.grad_sqr
    assert resumed.grad_var == estimator.grad_var


def test_estimator_rejects_bad_input() -> None:
    estimator = GradientStatsEstimator()
    with pytest.raises(ValueError, match="no gradient statistics"):
        _ = estimator.grad_sqr
    with pytest.raises(ValueError, match="count"):
        estimator.update(local_sqr=1.0, total_sqr=1.0, count=1, scale=1.0)
    with pytest.raises(ValueError, match="scale"):
        estimator.update(local_sqr=1.0, total_sqr=1.0, count=2, scale=0.0)
