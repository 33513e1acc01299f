"""The batch a goodput job runs at a count is the one the engine priced, within 5 % goodput.

Both sides compute `best_batch` over `fit` of the same step-time observations (the job's own
gauges, which the engine reads), so from the same inputs they choose the same batch. The reading's
lag (a scrape interval and the engine's round) is the only difference:

- the step times: the job chooses its batch when its world forms at the new count, before any
  step there, so its observations are those it exported before the rescale, which the engine read;
  a mean that moved since the scrape by a factor c scales every fitted step time by about c
  (the fit is in log space), which leaves the choice alone and moves goodput by c;
- the noise scale phi: it may have moved since the scrape. For every batch B, efficiency
  E(B) = (phi + B0) / (phi + B) has d ln E / d ln phi in [0, 1), so a drift of phi by a factor
  (1 + d) changes every candidate's goodput by at most that factor, and the job's best goodput
  then lies within d of the engine's best (its own optimum is at least the engine's batch under
  its phi, and at most its batch under the engine's phi times (1 + d)).

So the job's goodput is within 5 % of the price whenever phi moved by less than 5 % during the
lag. Within a count the job switches batch only for a 5 % gain (AdaptDL's hysteresis), which is
the one further allowance.
"""

import math

import pytest

from autoscaler.engine.goodput import observations, price
from autoscaler.engine.ports import GradientReport, StepTime
from autoscaler.goodput.batch import BatchLimits, best_batch
from autoscaler.goodput.efficiency import GradientNoise, efficiency
from autoscaler.goodput.step_time import fit

BOUND = 0.05
COUNTS = range(1, 17)
# Step times a job measured at the configurations it ran (different compute/sync shapes).
JOBS = {
    "compute-bound": (
        StepTime(1, 64, 0, 0.40),
        StepTime(2, 64, 0, 0.42),
        StepTime(4, 128, 0, 0.81),
    ),
    "sync-bound": (StepTime(1, 32, 0, 0.05), StepTime(4, 32, 0, 0.20), StepTime(8, 32, 0, 0.31)),
    "one-point": (StepTime(2, 32, 0, 0.30),),
    "accumulating": (StepTime(1, 16, 3, 0.9), StepTime(2, 16, 1, 0.5)),
}
PHIS = (20.0, 300.0, 5000.0)


def report(steps: tuple[StepTime, ...], phi: float) -> GradientReport:
    return GradientReport(noise_scale=phi, base_batch=32, max_local_batch=256,
                          max_global_batch=8192, steps=steps)  # fmt: skip


def job_goodput(steps: tuple[StepTime, ...], phi: float, count: int) -> float:
    """What the job runs at `count`: its own choice from its own (current) inputs."""
    model = fit(observations(report(steps, phi)))
    limits = BatchLimits(base_batch=32, max_local_batch=256, max_global_batch=8192)
    noise = GradientNoise(phi=phi, base_batch=32)
    return best_batch(model, noise, limits, replicas=count, nodes=count).goodput


def priced_goodput(steps: tuple[StepTime, ...], phi: float) -> dict[int, float]:
    priced = price(report(steps, phi), counts=COUNTS)
    return {n: b.samples_per_second * b.efficiency for n, b in priced.batches.items()}


@pytest.mark.parametrize("name", sorted(JOBS))
@pytest.mark.parametrize("phi", PHIS)
def test_same_inputs_same_goodput(name: str, phi: float) -> None:
    steps = JOBS[name]
    priced = priced_goodput(steps, phi)
    for count in COUNTS:
        assert job_goodput(steps, phi, count) == pytest.approx(priced[count], rel=1e-12)


@pytest.mark.parametrize("name", sorted(JOBS))
@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("drift", [-0.049, -0.02, 0.01, 0.03, 0.049])
def test_a_noise_scale_that_moved_during_the_lag_moves_goodput_no_more(
    name: str, phi: float, drift: float
) -> None:
    """The engine read phi; the job chooses at phi x (1 + drift), |drift| < 5 %."""
    steps = JOBS[name]
    priced = priced_goodput(steps, phi)
    for count in COUNTS:
        ratio = job_goodput(steps, phi * (1 + drift), count) / priced[count]
        assert abs(math.log(ratio)) <= abs(math.log1p(drift)) + 1e-9
        assert abs(ratio - 1) <= BOUND


@pytest.mark.parametrize("name", sorted(JOBS))
@pytest.mark.parametrize("scale", [0.97, 1.02, 1.04])
def test_step_times_that_moved_during_the_lag_keep_the_batch(name: str, scale: float) -> None:
    """Every mean moved by the same factor since the scrape (the job got slower or faster)."""
    steps = JOBS[name]
    moved = tuple(StepTime(s.replicas, s.local_batch, s.accum_steps, s.seconds * scale)
                  for s in steps)  # fmt: skip
    engine = price(report(steps, 300.0), counts=COUNTS).batches
    job = price(report(moved, 300.0), counts=COUNTS).batches
    for count in COUNTS:
        assert job[count].global_batch == engine[count].global_batch
        priced = engine[count].samples_per_second * engine[count].efficiency
        ratio = job[count].samples_per_second * job[count].efficiency / priced
        assert ratio == pytest.approx(1 / scale, rel=0.01)
        assert abs(ratio - 1) <= BOUND


@pytest.mark.parametrize("batch", [32, 64, 1024, 8192])
@pytest.mark.parametrize("phi", [1.0, 300.0, 1e5])
def test_efficiency_moves_less_than_the_noise_scale(batch: int, phi: float) -> None:
    """The inequality the bound rests on, at the batches a job may choose."""
    for drift in (0.001, 0.05, 0.5):
        moved = efficiency(GradientNoise(phi * (1 + drift), 32), batch)
        ratio = moved / efficiency(GradientNoise(phi, 32), batch)
        assert 1 <= ratio <= 1 + drift + 1e-12
