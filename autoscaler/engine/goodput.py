"""Pricing a goodput job (pure): its step-time model fitted over its own observations, each
count's best batch, and the snapshot that gives the policy its goodput curve.

The job chooses its batch with the same two functions of `autoscaler.goodput` over the same
observations (its step-time gauges), so the batch it runs at a count is the one priced here;
only the reading's lag differs (tests/unit/test_goodput_lag.py bounds what that costs). The batch
it reports running is priced too, so that any difference shows.
"""

import functools
import math
from collections.abc import Iterable

from autoscaler.engine.ports import GradientReport, ManagedJob
from autoscaler.engine.state import PricedBatch
from autoscaler.goodput.batch import BatchChoice, BatchLimits, goodput_curve
from autoscaler.goodput.efficiency import GradientNoise, efficiency
from autoscaler.goodput.step_time import StepObservation, StepTimeModel, fit, throughput
from autoscaler.policies.contract import (
    BatchAtCount,
    Goodput,
    JobSnapshot,
    ModelCurve,
    RunningBatch,
)


def nodes_of(replicas: int) -> int:
    """One rank per worker pod and its placement unknown: each counts as its own node (the
    training helper counts them the same way, so both fit the same observations)."""
    return replicas


def observations(report: GradientReport) -> list[StepObservation]:
    """The job's step times as the step-time model's observations."""
    return [
        StepObservation(
            nodes=nodes_of(step.replicas),
            replicas=step.replicas,
            local_batch=step.local_batch,
            accum_steps=step.accum_steps,
            step_seconds=step.seconds,
        )
        for step in report.steps
        if step.replicas > 0 and step.local_batch > 0 and step.accum_steps >= 0
        and math.isfinite(step.seconds) and step.seconds > 0
    ]  # fmt: skip


# A fit is most of a job's pricing and its inputs repeat while the job's gauges stand still
# (between its scrapes, or at a count it has left): the exact observations are the key, so a hit
# is the fit the job makes too. The entries are immutable.
@functools.lru_cache(maxsize=4096)
def fitted(found: tuple[StepObservation, ...]) -> StepTimeModel:
    return fit(found)


def price(report: GradientReport, *, counts: Iterable[int]) -> Goodput:
    """The best batch at each worker count, under the model fitted over the job's observations
    (the prior where it has none)."""
    model = fitted(tuple(observations(report)))
    noise = GradientNoise(phi=report.noise_scale, base_batch=report.base_batch)
    limits = BatchLimits(
        base_batch=report.base_batch,
        max_local_batch=report.max_local_batch,
        max_global_batch=report.max_global_batch,
    )
    curve = goodput_curve(model, noise, limits, counts, nodes_of=nodes_of)
    batches = {count: batch_at(choice) for count, choice in curve.items() if usable(choice)}
    return Goodput(
        noise_scale=report.noise_scale,
        base_batch=report.base_batch,
        batches=batches,
        running=running_batch(report, model, noise),
    )


def running_batch(
    report: GradientReport, model: StepTimeModel, noise: GradientNoise
) -> RunningBatch | None:
    """The batch the job reports running, priced as its best ones are, so that how far the job
    runs from the price is seen (None: it reports no batch, or one below its base batch)."""
    replicas, local, accum = report.replicas, report.local_batch, report.accum_steps
    if not replicas or not local or accum is None or accum < 0:
        return None
    global_batch = replicas * local * (accum + 1)
    if global_batch < report.base_batch:  # below B0 the efficiency model does not hold
        return None
    rate = throughput(
        model, nodes=nodes_of(replicas), replicas=replicas, local_batch=local, accum_steps=accum
    )
    gained = efficiency(noise, global_batch)
    if not (math.isfinite(rate) and rate > 0 and 0 < gained <= 1):
        return None
    return RunningBatch(
        replicas=replicas,
        local_batch=local,
        accum_steps=accum,
        global_batch=global_batch,
        efficiency=gained,
        samples_per_second=rate,
    )


def batch_at(choice: BatchChoice) -> BatchAtCount:
    return BatchAtCount(
        local_batch=choice.local_batch,
        accum_steps=choice.accum_steps,
        global_batch=choice.global_batch,
        efficiency=choice.efficiency,
        samples_per_second=choice.throughput,
    )


def usable(choice: BatchChoice) -> bool:
    """A choice the contract can carry: finite, positive throughput and efficiency in (0, 1]."""
    fine = math.isfinite(choice.throughput) and math.isfinite(choice.efficiency)
    return fine and choice.fits and 0 < choice.efficiency <= 1


def priced_snapshot(job: JobSnapshot, goodput: Goodput) -> JobSnapshot:
    """The job as a policy sees it when sized by goodput: its model curve is the goodput at every
    priced count (computed this round), in the unit its remaining work is counted in, beside
    the throughput observed; a count where no batch fits its bounds is not allowed."""
    curve = {n: b.goodput for n, b in goodput.batches.items()}
    update: dict[str, object] = {
        "curve": ModelCurve(source="goodput", values=curve),
        "goodput": goodput,
    }
    if any(
        not job.allows(n) or n not in curve for n in range(job.min_replicas, job.max_replicas + 1)
    ):
        update["allowed_replicas"] = fitting(job, goodput)
    return job.model_copy(update=update)


def fitting(job: JobSnapshot, goodput: Goodput) -> tuple[int, ...]:
    """The counts the job allows at which a batch fits its bounds, ascending."""
    return tuple(n for n in sorted(goodput.batches) if job.allows(n))


def allowed(job: ManagedJob) -> list[int]:
    """The counts a goodput job is priced at: every count it may run at."""
    counts = range(job.min_replicas, job.max_replicas + 1)
    return [n for n in counts if job.allowed_replicas is None or n in job.allowed_replicas]


def well_formed(report: GradientReport) -> bool:
    """Whether the report can be priced: a finite noise scale and positive, ordered bounds."""
    bounds = 0 < report.base_batch <= report.max_global_batch and report.max_local_batch > 0
    return bounds and math.isfinite(report.noise_scale) and report.noise_scale >= 0


def price_job(job: ManagedJob, report: GradientReport) -> Goodput | None:
    """The job priced by its report; None when the report cannot be priced or no batch fits at
    any count (its throughput curve stays)."""
    if not well_formed(report):
        return None
    goodput = price(report, counts=allowed(job))
    return goodput if goodput.batches else None


def efficiency_at(goodput: Goodput | None, count: int) -> float:
    """The statistical efficiency of the batch priced at `count`: what a sample of the job's
    throughput is worth in samples at its base batch (1 for a job not priced, or a count not)."""
    priced = priced_at(goodput, count)
    return 1.0 if priced is None else priced.batch.efficiency


def priced_at(goodput: Goodput | None, count: int) -> PricedBatch | None:
    """A goodput job's pricing at `count`; None for a job not priced, or an unpriced count."""
    batch = goodput.batches.get(count) if goodput is not None else None
    if goodput is None or batch is None:
        return None
    running = goodput.running
    return PricedBatch(
        noise_scale=goodput.noise_scale,
        base_batch=goodput.base_batch,
        replicas=count,
        batch=batch,
        running=running if running is not None and running.replicas == count else None,
    )
