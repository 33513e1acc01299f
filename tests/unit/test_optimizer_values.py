"""The optimizer's values and the reported objective, computed for all jobs at once, against the
formulas written job by job: random snapshots must give the very same numbers, bit for bit; and
the restart discount an objective over speedups prices a rescale by."""

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autoscaler.policies.contract import JobSnapshot, Snapshot
from autoscaler.policies.global_optimizer import (
    EXPLORING,
    GlobalOptimizer,
    GlobalOptimizerConfig,
)
from autoscaler.policies.objective import Floats, Objective
from autoscaler.policies.speedup import (
    JobCurve,
    JobKey,
    current_count,
    job_curve,
    objective_value,
    remaining_samples,
)
from autoscaler.policies.throughput_model import ThroughputModel
from tests.support.clock import NOW

GPU = "nvidia.com/gpu"
MODELS = [EXPLORING, ThroughputModel(), ThroughputModel(exploration_step=0)]
# Zero and negative observations are dropped by the fit; tiny ones give huge remaining times.
THROUGHPUTS = st.floats(1e-3, 1e5) | st.sampled_from([0.0, -5.0])
OBJECTIVES = st.builds(
    Objective,
    kind=st.sampled_from(["completion-time", "throughput", "proportional", "power-mean"]),
    exponent=st.sampled_from([-2.0, -1.0, -0.25, 0.0, 0.5, 1.0]) | st.floats(-3.0, 3.0),
) | st.builds(
    Objective,
    kind=st.just("completion-time"),
    exponent=st.sampled_from([-1.0, -0.25, 0.5]) | st.floats(-3.0, 3.0),
    rank_exponent=st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0.0, 2.0),
)


@st.composite
def configs(draw: st.DrawFn) -> GlobalOptimizerConfig:
    """Any objective; Pollux's restart factor where it applies (objectives over speedups)."""
    objective = draw(OBJECTIVES)
    discounts = ["horizon"] if objective.over_remaining_time else ["horizon", "age"]
    return GlobalOptimizerConfig(
        objective=objective,
        restart_seconds=draw(st.floats(0.0, 900.0)),
        horizon_seconds=draw(st.floats(1.0, 5000.0)),
        restart_discount=draw(st.sampled_from(discounts)),
        model=draw(st.sampled_from(MODELS)),
    )


@st.composite
def jobs(draw: st.DrawFn, name: str) -> JobSnapshot:
    """A job with or without observations (some past its bounds, some unusable), allowed counts,
    its own restart time, declared work: every input the values depend on."""
    low = draw(st.integers(1, 4))
    high = draw(st.integers(low, low + 9))
    observed = draw(st.dictionaries(st.integers(1, high + 2), THROUGHPUTS, max_size=5))
    ages = st.dictionaries(st.sampled_from(sorted(observed)), st.floats(0.0, 7200.0), max_size=3)
    allowed = st.lists(st.integers(low, high), min_size=1, max_size=4, unique=True)
    return JobSnapshot(
        namespace="ns",
        name=name,
        min_replicas=low,
        max_replicas=high,
        replicas=draw(st.integers(1, high + 2)),
        resources_per_replica={GPU: draw(st.sampled_from([0.0, 1.0, 4.0]))},
        weight=draw(st.floats(0.1, 10.0)),
        throughput=observed,
        throughput_age_seconds=draw(ages) if observed else {},
        restart_seconds=draw(st.none() | st.floats(0.0, 900.0)),
        remaining_samples=draw(st.none() | st.floats(0.0, 1e9)),
        attained_seconds=draw(st.floats(0.0, 1e5)),
        age_seconds=draw(st.none() | st.floats(0.0, 1e5)),
        rescales=draw(st.integers(0, 50)),
        allowed_replicas=draw(st.none() | allowed.map(lambda counts: tuple(sorted(counts)))),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    count = draw(st.integers(1, 12))
    return Snapshot(
        capacity={GPU: draw(st.floats(0.0, 64.0))},
        jobs=[draw(jobs(f"job-{i}")) for i in range(count)],
    )


def utility(objective: Objective, quantity: Floats, *, weight: float) -> Floats:
    """`Objective.utility` of one job, as defined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if objective.logarithmic:
            term = np.log(quantity)
        elif objective.kind in ("power-mean", "completion-time"):
            term = np.power(quantity, objective.exponent)
        else:
            term = quantity
    terms = weight * term
    signed = -terms if objective.minimised else terms
    return np.where(np.isfinite(signed), signed, -np.inf)


def seconds_left(job: JobSnapshot, curve: JobCurve) -> Floats:
    """`remaining_seconds`, as defined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        seconds = remaining_samples(job, curve) / curve.throughput
    return np.where(np.isnan(seconds), np.nan, np.maximum(seconds, 1.0))


def weight_of(
    objective: Objective, job: JobSnapshot, jobs: Sequence[JobSnapshot], *, model: ThroughputModel
) -> float:
    """A job's weight in the objective, as defined: when it ranks, its own times its rank (how
    many known jobs declaring their work have more remaining time at their smallest count, or as
    much with a key not after its own) to the rank exponent; its own alone if it declares none."""
    if not objective.ranks:
        return job.weight
    left = {}
    for other in jobs:
        curve = job_curve(other, model=model)
        if curve.known and other.remaining_samples is not None:
            left[other.key] = other.remaining_samples / curve.throughput[0]
    if job.key not in left:
        return job.weight
    mine = left[job.key]
    rank = int(sum(x > mine or (x == mine and key <= job.key) for key, x in left.items()))
    return job.weight * rank**objective.rank_exponent


def job_values(
    config: GlobalOptimizerConfig, job: JobSnapshot, curve: JobCurve, *, weight: float
) -> Floats:
    """One job's values, formula by formula."""
    current = current_count(job) - job.min_replicas
    if not curve.known:
        values = np.full(len(curve.throughput), -np.inf)
        values[current] = 0.0
        return values
    restart = job.restart_seconds if job.restart_seconds is not None else config.restart_seconds
    speedup = curve.throughput / curve.throughput[0]
    objective = config.objective
    if objective.over_remaining_time:
        seconds = seconds_left(job, curve)
        training = max(config.horizon_seconds - restart, restart)
        stalls = restart * np.maximum(1.0, np.nan_to_num(seconds, nan=0.0) / training)
        stalls[current] = 0.0
        values = utility(objective, seconds + stalls, weight=weight)
    else:
        if config.restart_discount == "horizon":
            kept = max(0.0, 1.0 - restart / config.horizon_seconds)
        else:  # Pollux's restart factor
            age = job.age_seconds
            if restart == 0 or age is None:
                kept = 1.0
            else:
                kept = max(0.0, age - job.rescales * restart) / (age + restart)
        factors = np.full(len(curve.throughput), kept)
        factors[current] = 1.0
        values = utility(objective, np.nan_to_num(speedup, nan=0.0) * factors, weight=weight)
    counts = np.arange(job.min_replicas, job.max_replicas + 1)
    values[np.isnan(speedup) | ~np.array([job.allows(int(n)) for n in counts])] = -np.inf
    if not np.isfinite(values).any():
        values[current] = 0.0
    return values


def reported(
    snapshot: Snapshot,
    replicas: Mapping[JobKey, int],
    *,
    objective: Objective,
    model: ThroughputModel,
) -> float:
    """`objective_value`, job by job."""
    quantities, weights = [], []
    for job in snapshot.jobs:
        curve = job_curve(job, model=model)
        count = replicas.get(job.key, job.replicas)
        if curve.known and np.isfinite(curve.at(count)):
            index = count - curve.low
            per_job = (
                seconds_left(job, curve)
                if objective.over_remaining_time
                else curve.throughput / curve.throughput[0]
            )
            quantities.append(per_job[index])
            weights.append(weight_of(objective, job, snapshot.jobs, model=model))
    return objective.value(np.array(quantities), weights=np.array(weights))


@settings(max_examples=300)
@given(snapshots(), configs())
def test_the_values_of_all_jobs_at_once_are_those_of_each_job(
    snapshot: Snapshot, config: GlobalOptimizerConfig
) -> None:
    optimizer = GlobalOptimizer(config)
    curves = [job_curve(job, model=config.model) for job in snapshot.jobs]
    values = optimizer._all_values(snapshot.jobs, curves)
    assert len(values) == len(snapshot.jobs)
    for job, curve, row in zip(snapshot.jobs, curves, values, strict=True):
        weight = weight_of(config.objective, job, snapshot.jobs, model=config.model)
        expected = job_values(config, job, curve, weight=weight)
        assert row.dtype == np.float64
        np.testing.assert_array_equal(row, expected, strict=True, err_msg=job.name)


@settings(max_examples=300)
@given(snapshots(), OBJECTIVES, st.sampled_from(MODELS), st.data())
def test_the_reported_objective_is_the_sum_job_by_job(
    snapshot: Snapshot, objective: Objective, model: ThroughputModel, data: st.DataObject
) -> None:
    counts = st.dictionaries(
        st.sampled_from([job.key for job in snapshot.jobs]), st.integers(1, 16), max_size=12
    )
    replicas = data.draw(counts)
    found = objective_value(snapshot, replicas, objective=objective, model=model)
    expected = reported(snapshot, replicas, objective=objective, model=model)
    assert found == expected or (np.isnan(found) and np.isnan(expected))


POWER_MEAN = Objective(kind="power-mean", exponent=-1.0)
# (restart discount, the job's age in seconds, its rescales so far, the count it is given)
DISCOUNTS = [
    ("horizon", 100.0, 3, 4),  # 1 - 30/600 of a doubled speedup: worth it
    ("age", 100.0, 3, 2),  # Pollux: (100 - 3 x 30) / (100 + 30) of it is not
    ("age", 100.0, 0, 4),  # ... unless it was never rescaled
    ("age", 10_000.0, 3, 4),  # ... or has lived long enough for three restarts
    ("age", 0.0, 0, 2),  # a job just created would spend all its life restarting
    ("age", None, 3, 4),  # no age in the snapshot: no discount, not a frozen job
]


@pytest.mark.parametrize(("discount", "age", "rescales", "count"), DISCOUNTS)
def test_pollux_restart_factor_keeps_a_job_rescaled_often_for_its_age(
    discount: Literal["horizon", "age"], age: float | None, rescales: int, count: int
) -> None:
    job = JobSnapshot(
        namespace="ns",
        name="a",
        min_replicas=2,
        max_replicas=4,
        replicas=2,
        resources_per_replica={GPU: 1.0},
        throughput={2: 200.0, 4: 400.0},
        age_seconds=age,
        rescales=rescales,
    )
    config = GlobalOptimizerConfig(
        objective=POWER_MEAN, restart_seconds=30.0, restart_discount=discount
    )
    (decision,) = GlobalOptimizer(config).decide(Snapshot(capacity={GPU: 4.0}, jobs=[job]), now=NOW)
    assert decision.replicas == count


def test_pollux_restart_factor_needs_an_objective_over_speedups() -> None:
    with pytest.raises(ValidationError, match="restart_discount applies to objectives over"):
        GlobalOptimizerConfig(restart_discount="age")


@pytest.mark.parametrize("kind", ["throughput", "proportional", "power-mean"])
def test_ranks_need_remaining_times(
    kind: Literal["throughput", "proportional", "power-mean"],
) -> None:
    with pytest.raises(ValidationError, match="rank_exponent applies to completion-time"):
        Objective(kind=kind, rank_exponent=1.0)
    assert not Objective(kind=kind).ranks  # the default exponent is for completion-time only
