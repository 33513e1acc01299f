"""A goodput job's choices from its own measurements: batch per replica count (with the switching
margin), learning rate by rule, progress in samples at B0, and state kept through a checkpoint."""

import pytest

from autoscaler.goodput.efficiency import efficiency
from autoscaler.training.adaptation import Adaptation, Config, GoodputSpec, NormSample, in_halves

SPEC = GoodputSpec(base_batch=128, max_local_batch=256, max_global_batch=4096)


def noisy(adaptation: Adaptation, phi: float, steps: int = 50) -> Adaptation:
    """Feed measurements whose exact noise scale is `phi` (two pieces at the base batch)."""
    sqr, var = 1.0, phi / SPEC.base_batch  # var of a B0 batch's gradient
    local, total = sqr + 2 * var, sqr + var  # each piece is B0 / 2
    for _ in range(steps):
        adaptation.measure(NormSample(local, total, 2), batch=SPEC.base_batch)
    return adaptation


def timed(adaptation: Adaptation, seconds_of: dict[Config, float]) -> Adaptation:
    for config, seconds in seconds_of.items():
        for _ in range(3):
            adaptation.record_step(config, seconds)
    return adaptation


def test_the_estimate_recovers_the_noise_scale() -> None:
    noise = noisy(Adaptation(SPEC), phi=500.0).noise
    assert noise is not None
    assert noise.phi == pytest.approx(500.0)


def test_before_any_measurement_progress_counts_the_base_batch_only() -> None:
    adaptation = Adaptation(SPEC)
    assert adaptation.noise is None
    assert adaptation.advance(1024) == pytest.approx(128)
    assert adaptation.samples == 1024


def test_progress_is_the_batch_times_its_efficiency() -> None:
    adaptation = noisy(Adaptation(SPEC), phi=1000.0)
    assert adaptation.noise is not None
    made = adaptation.advance(512)
    assert made == pytest.approx(512 * efficiency(adaptation.noise, 512))
    assert 128 < made < 512


@pytest.mark.parametrize(("rule", "expected"), [("linear", 4.0), ("sqrt", 2.0)])
def test_the_learning_rate_follows_the_declared_rule(rule: str, expected: float) -> None:
    spec = GoodputSpec(128, 256, 4096, lr_rule=rule)  # type: ignore[arg-type]
    assert noisy(Adaptation(spec), phi=1000.0).lr_factor(512) == pytest.approx(expected)


def test_adascale_multiplies_by_the_gain() -> None:
    adaptation = noisy(Adaptation(SPEC), phi=1000.0)
    scale = 512 / 128
    gain = scale * (1000 + 128) / (1000 + 512)
    assert adaptation.lr_factor(512) == pytest.approx(gain)


def measured_job(phi: float) -> Adaptation:
    """A job that ran at 1, 2 and 4 replicas with compute linear in the local batch."""
    seconds = {
        Config(r, m, 0): 0.05 + 0.001 * m + (0.02 if r > 1 else 0.0)
        for r in (1, 2, 4)
        for m in (64, 128, 256)
    }
    return timed(noisy(Adaptation(SPEC), phi=phi), seconds)


def test_the_chosen_global_batch_grows_with_the_workers() -> None:
    adaptation = measured_job(phi=2000.0)
    batches = [adaptation.choose(r).global_batch for r in (1, 2, 4, 8)]
    assert batches == sorted(batches)
    assert batches[-1] > batches[0]
    assert all(SPEC.base_batch <= b <= SPEC.max_global_batch for b in batches)


def test_a_low_noise_job_stays_near_its_base_batch() -> None:
    low = measured_job(phi=10.0).choose(4).global_batch
    high = measured_job(phi=5000.0).choose(4).global_batch
    assert low < high


def test_the_current_batch_is_kept_within_the_switching_margin() -> None:
    adaptation = measured_job(phi=2000.0)
    best = adaptation.choose(4)
    near = Config(4, best.local_batch, best.accum_steps)
    assert adaptation.choose(4, current=near) == near
    poor = Config(4, 32, 0)  # far below the best: switched
    assert adaptation.choose(4, current=poor) == best
    other_count = Config(2, best.local_batch, best.accum_steps)
    assert adaptation.choose(4, current=other_count) == best


def test_the_state_survives_a_checkpoint() -> None:
    adaptation = measured_job(phi=2000.0)
    adaptation.advance(512)
    restored = Adaptation(SPEC, adaptation.state_dict())
    assert restored.noise == adaptation.noise
    assert restored.step_seconds() == adaptation.step_seconds()
    assert (restored.progress, restored.samples) == (adaptation.progress, adaptation.samples)
    assert restored.choose(4) == adaptation.choose(4)


def test_the_step_time_is_the_mean_per_configuration() -> None:
    adaptation = Adaptation(SPEC)
    for seconds in (0.1, 0.3):
        adaptation.record_step(Config(2, 64, 1), seconds)
    assert adaptation.step_seconds() == {(2, 64, 1): pytest.approx(0.2)}


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="base_batch"):
        GoodputSpec(base_batch=8192, max_local_batch=256, max_global_batch=4096)


def test_an_infinite_early_estimate_does_not_pick_the_largest_batch() -> None:
    adaptation = Adaptation(SPEC)
    adaptation.measure(NormSample(local_sqr=2.0, total_sqr=0.5, pieces=2), batch=128)  # sqr < 0
    assert adaptation.noise is not None
    assert adaptation.noise.phi == float("inf")
    assert adaptation.choose(2).global_batch < SPEC.max_global_batch
    assert adaptation.advance(512) == pytest.approx(128)
    assert adaptation.report(Config(2, 64, 0)).noise_scale is None


@pytest.mark.parametrize(
    ("chosen", "running"),
    [
        (Config(1, 128, 0), Config(1, 64, 1)),  # one replica, one micro-step: two halves
        (Config(1, 127, 0), Config(1, 127, 0)),  # an odd batch is not halved
        (Config(1, 128, 1), Config(1, 128, 1)),  # its micro-steps are already its pieces
        (Config(2, 128, 0), Config(2, 128, 0)),  # the other replica is the other piece
    ],
)
def test_one_replica_measures_from_two_half_micro_batches(chosen: Config, running: Config) -> None:
    assert in_halves(chosen) == running
    assert in_halves(chosen).global_batch == chosen.global_batch  # the same samples a step
