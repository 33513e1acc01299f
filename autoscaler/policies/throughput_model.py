"""Per-job throughput curves `T(n)` (samples/s by worker count) from what was observed.

The fitted shape is physical (Optimus' synchronous model, Pollux's compute + communication split):
the time per sample and worker, `n / T(n)`, is

    D(n) = a + [n > 1] · (s + b·n + c·n²)        with a, s, b, c ≥ 0

`a` is compute, `s` the fixed cost of synchronising at all, `b·n` and `c·n²` the all-reduce and
per-worker overheads that grow with the world (a fixed global batch gives the `n²` term). D is
linear in the parameters, so the fit is a weighted non-negative least squares on relative errors.
Old points decay with a half-life; a prior (near-linear scaling with a sync overhead) weighs like
`prior_weight` observations, so one point already gives a curve, and data soon outweighs it.
"""

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat
from scipy.optimize import nnls

Floats = npt.NDArray[np.float64]


class ThroughputModel(BaseModel):
    """How a job's throughput curve is fitted from its observations."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    half_life_seconds: PositiveFloat = Field(
        default=1800.0, description="an observation this old counts half as much as a fresh one"
    )
    prior_weight: float = Field(default=0.5, ge=0, description="the prior's weight in observations")
    prior_sync_overhead: float = Field(
        default=0.1, ge=0, description="the prior's cost of synchronising, as a share of compute"
    )
    exploration_step: int = Field(
        default=1, ge=0, description="how far past the largest observed count a job may be sized"
    )
    exploration_factor: float = Field(
        default=1.0,
        ge=1.0,
        description="...or how many times the largest observed count, whichever is larger",
    )
    extrapolation: Literal["fit", "optimistic"] = Field(
        default="fit",
        description="past the largest observed count: the fit, or the most a concave curve"
        " could reach there (the last observed slope carried on), when that is more",
    )


# The lineup's one model: a job is explored up to twice its largest observed count at once (or one
# more worker), valued there as high as a concave curve through its last two points could reach.
EXPLORING = ThroughputModel(exploration_factor=2.0, extrapolation="optimistic")


def features(counts: npt.ArrayLike) -> Floats:
    """Columns (1, [n>1], [n>1]·n, [n>1]·n²) of D(n) for each count."""
    n = np.asarray(counts, dtype=np.float64)
    multi = (n > 1).astype(np.float64)
    return np.column_stack([np.ones_like(n), multi, multi * n, multi * n * n])


def fit_parameters(
    *, points: Mapping[int, float], ages: Mapping[int, float], model: ThroughputModel
) -> Floats:
    """(a, s, b, c) from observed throughput by count; ages in seconds (absent = fresh)."""
    counts = np.array(sorted(points), dtype=np.float64)
    per_sample = counts / np.array([points[int(n)] for n in counts])
    decay = np.array([0.5 ** (ages.get(int(n), 0.0) / model.half_life_seconds) for n in counts])
    rows = features(counts) / per_sample[:, None]  # relative error: divide by the observation
    scale = np.sqrt(decay)[:, None]
    lhs, rhs = rows * scale, np.ones(len(counts)) * scale[:, 0]
    prior = _prior(counts=counts, per_sample=per_sample, model=model)
    if model.prior_weight > 0:
        lhs, rhs = _with_prior(lhs=lhs, rhs=rhs, prior=prior, weight=model.prior_weight)
    solution, _ = nnls(lhs, rhs)
    return np.asarray(solution, dtype=np.float64)


def _prior(*, counts: Floats, per_sample: Floats, model: ThroughputModel) -> Floats:
    """Near-linear scaling: compute `a` from the smallest count seen, plus a fixed sync cost."""
    smallest, observed = counts[0], per_sample[0]
    sync = model.prior_sync_overhead
    compute = observed / (1 + sync) if smallest > 1 else observed
    return np.array([compute, sync * compute, 0.0, 0.0])


def _with_prior(*, lhs: Floats, rhs: Floats, prior: Floats, weight: float) -> tuple[Floats, Floats]:
    """Pseudo-rows pulling each parameter towards the prior, scaled to the compute term."""
    strength = np.sqrt(weight) / prior[0]
    return np.vstack([lhs, strength * np.eye(4)]), np.concatenate([rhs, strength * prior])


def curve(
    *,
    points: Mapping[int, float],
    ages: Mapping[int, float],
    low: int,
    high: int,
    model: ThroughputModel,
    explored: bool = True,
) -> Floats:
    """T(n) for n in [low, high]; observed counts keep their values, the rest come from the fit.

    With a value for every count the observations are used as they are. Counts past the
    exploration bound (largest observed + step, or times factor) get NaN: nobody may size a job
    there yet. `explored` False: the points are a model's, which no exploration bound limits.
    """
    usable = tuple(sorted((n, t) for n, t in points.items() if math.isfinite(t) and t > 0))
    fitted = _curve(usable, tuple(sorted(ages.items())), low, high, model, explored=explored)
    return np.array(fitted, dtype=np.float64)


# A round fits each job's curve twice from the same inputs: the policy on its snapshot, the engine
# for the objective and predictions it reports (`make bench-scale` times the round). The cache
# holds two rounds of 8,000 jobs; its entries are immutable.
@lru_cache(maxsize=16_384)
def _curve(
    points: tuple[tuple[int, float], ...],
    ages: tuple[tuple[int, float], ...],
    low: int,
    high: int,
    model: ThroughputModel,
    *,
    explored: bool,
) -> tuple[float, ...]:
    values = _fitted(
        dict(points), ages=dict(ages), low=low, high=high, model=model, explored=explored
    )
    return tuple(float(v) for v in values)


def _fitted(
    usable: Mapping[int, float],
    *,
    ages: Mapping[int, float],
    low: int,
    high: int,
    model: ThroughputModel,
    explored: bool,
) -> Floats:
    counts = np.arange(low, high + 1)
    if not usable:
        return np.full(len(counts), np.nan)
    if all(n in usable for n in counts):
        return np.array([usable[int(n)] for n in counts], dtype=np.float64)
    parameters = fit_parameters(points=usable, ages=ages, model=model)
    with np.errstate(divide="ignore"):
        fitted = counts / (features(counts) @ parameters)
    observed = np.array([usable.get(int(n), np.nan) for n in counts])
    values = np.where(np.isnan(observed), fitted, observed)
    if model.extrapolation == "optimistic":
        values = np.maximum(values, _carried_on(usable, counts.astype(np.float64)))
    if not explored:
        return values
    largest = max(usable)
    bound = max(largest + model.exploration_step, largest * model.exploration_factor)
    return np.where(counts <= bound, values, np.nan)


def _carried_on(points: Mapping[int, float], counts: Floats) -> Floats:
    """Past the largest observed count, its value plus the slope of the last two observed counts
    (never negative): no concave curve through them is higher there. A fit that bends down past
    the data kept jobs from growing in the simulator although their real curves still rose (the
    GPU utilisation of `make bench-sim`). Elsewhere: 0 (nothing to add)."""
    if len(points) < 2:
        return np.zeros(len(counts))
    (low, below), (high, top) = sorted(points.items())[-2:]
    slope = max(0.0, (top - below) / (high - low))
    return np.where(counts > high, top + slope * (counts - high), 0.0)
