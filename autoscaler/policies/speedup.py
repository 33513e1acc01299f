"""Each job's throughput curve over its allowed counts, and speedups relative to its minimum."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autoscaler.policies.contract import JobSnapshot, Snapshot
from autoscaler.policies.objective import Objective
from autoscaler.policies.throughput_model import ThroughputModel, curve

Floats = npt.NDArray[np.float64]
JobKey = tuple[str, str]


@dataclass(frozen=True)
class JobCurve:
    """T(n) for n in [low, low + len - 1]; NaN where the count may not be chosen yet."""

    low: int
    throughput: Floats

    @property
    def known(self) -> bool:
        smallest = float(self.throughput[0])
        return math.isfinite(smallest) and smallest > 0

    @property
    def speedup(self) -> Floats:
        return speedup_over(self.throughput, self.throughput[0])

    def at(self, count: int) -> float:
        index = count - self.low
        inside = 0 <= index < len(self.throughput)
        return float(self.throughput[index]) if inside else float("nan")


def speedup_over(throughput: Floats, smallest: Floats | float) -> Floats:
    """Throughput relative to the throughput at the job's minimum count (arrays broadcast)."""
    return np.asarray(throughput / smallest, dtype=np.float64)


def job_curve(job: JobSnapshot, *, model: ThroughputModel) -> JobCurve:
    """The job's model curve where it has one (fresh, every count it prices taken as it is, the
    others fitted, with no exploration bound), else the curve `model` fits to its observations,
    within `model`'s exploration bound."""
    points, ages = (
        (job.curve.values, {})
        if job.curve is not None
        else (job.throughput, job.throughput_age_seconds)
    )
    values = curve(
        points=points,
        ages=ages,
        low=job.min_replicas,
        high=job.max_replicas,
        model=model,
        explored=job.curve is None,
    )
    return JobCurve(low=job.min_replicas, throughput=values)


# A job that declared no work and has barely run is assumed to have at least this many
# worker-seconds left, so a new job is served first but not infinitely so.
MIN_ESTIMATED_WORKER_SECONDS = 600.0


def remaining_samples(job: JobSnapshot, curve: JobCurve) -> float:
    """The samples the job has left: declared, else estimated from the service it attained.

    The estimate is the rule least-attained-service scheduling (Tiresias) rests on: with job
    sizes as heavy-tailed as measured in GPU clusters, a job that has run longer is expected to
    run longer still; here, to need as much again as it had (at its current per-worker rate).
    """
    if job.remaining_samples is not None:
        return job.remaining_samples
    return estimated_samples(job, curve)


def estimated_samples(job: JobSnapshot, curve: JobCurve) -> float:
    """The samples left as the attained-service estimate has them, whatever the job declared."""
    current = current_count(job)
    per_worker = curve.at(current) / current
    if not np.isfinite(per_worker):
        per_worker = curve.throughput[0] / curve.low
    return max(job.attained_seconds, MIN_ESTIMATED_WORKER_SECONDS) * per_worker


def remaining_seconds(job: JobSnapshot, curve: JobCurve) -> Floats:
    """Expected seconds to finish at every count of the curve, at its throughput there (NaN
    where the count may not be chosen); at least a second, so that no term is infinite."""
    return seconds_to_finish(remaining_samples(job, curve), curve.throughput)


def seconds_to_finish(samples: Floats | float, throughput: Floats) -> Floats:
    """`remaining_seconds` from the samples left and the throughput (arrays broadcast)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        seconds = samples / throughput
    return np.where(np.isnan(seconds), np.nan, np.maximum(seconds, 1.0))


def completion_weights(
    jobs: Sequence[JobSnapshot], curves: Sequence[JobCurve], *, objective: Objective
) -> Floats:
    """Each job's weight in `objective`: its own, and when it `ranks` also times its rank to the
    `rank_exponent`, the rank being the number of known jobs declaring their work with at least
    as many seconds left at their smallest count (a tie goes by key), so the job with the most
    left ranks 1. A job that declares no work is not ranked (weighted as rank 1): its work left
    is a guess from the service it had, and ranking on the guess lengthens the mean JCT
    (`benchmarks/sweep_sim.py --declared-work none`)."""
    weights = np.array([job.weight for job in jobs], dtype=np.float64)
    if not objective.ranks:
        return weights
    left = {
        index: job.remaining_samples / float(curve.throughput[0])
        for index, (job, curve) in enumerate(zip(jobs, curves, strict=True))
        if curve.known and job.remaining_samples is not None
    }
    most_first = sorted(left, key=lambda index: (-left[index], jobs[index].key))
    for rank, index in enumerate(most_first, start=1):
        weights[index] *= rank**objective.rank_exponent
    return weights


def current_count(job: JobSnapshot) -> int:
    """The job's count, clamped into its bounds (bounds may have changed since it was set)."""
    return min(max(job.replicas, job.min_replicas), job.max_replicas)


def smallest(job: JobSnapshot) -> int:
    """The lowest count the job may run at."""
    return job.allowed_replicas[0] if job.allowed_replicas else job.min_replicas


def curves(snapshot: Snapshot, *, model: ThroughputModel) -> dict[JobKey, JobCurve]:
    return {job.key: job_curve(job, model=model) for job in snapshot.jobs}


def objective_value(
    snapshot: Snapshot,
    replicas: Mapping[JobKey, int],
    *,
    objective: Objective,
    model: ThroughputModel,
    fitted: Mapping[JobKey, JobCurve] | None = None,
) -> float:
    """The objective of a set of counts, exactly as `Objective` defines it (remaining times
    without the stall of getting there).

    Jobs with no throughput data, or sized where their curve is unknown, have no speedup and are
    left out of the sum. `fitted`: the snapshot's curves when the caller has them already.
    """
    fitted = fitted if fitted is not None else curves(snapshot, model=model)
    every = [fitted[job.key] for job in snapshot.jobs]
    weighted = completion_weights(snapshot.jobs, every, objective=objective)
    scored = []
    for job, its, weight in zip(snapshot.jobs, every, weighted, strict=True):
        count = replicas.get(job.key, job.replicas)
        if its.known and np.isfinite(its.at(count)):
            scored.append((job, its, its.throughput[count - its.low], weight))
    # One array operation over all jobs (not one per job: a round sums thousands).
    at = np.array([throughput for _, _, throughput, _ in scored], dtype=np.float64)
    if objective.over_remaining_time:
        samples = np.array([remaining_samples(job, curve) for job, curve, _, _ in scored])
        quantities = seconds_to_finish(samples, at)
    else:
        smallest = np.array([curve.throughput[0] for _, curve, _, _ in scored], dtype=np.float64)
        quantities = speedup_over(at, smallest)
    weights = np.array([weight for _, _, _, weight in scored], dtype=np.float64)
    return objective.value(quantities, weights=weights)
