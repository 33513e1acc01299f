"""Each job's throughput curve over its allowed counts, and speedups relative to its minimum."""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

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
        return bool(np.isfinite(self.throughput[0]) and self.throughput[0] > 0)

    @property
    def speedup(self) -> Floats:
        return np.asarray(self.throughput / self.throughput[0], dtype=np.float64)

    def at(self, count: int) -> float:
        index = count - self.low
        inside = 0 <= index < len(self.throughput)
        return float(self.throughput[index]) if inside else float("nan")


def job_curve(job: JobSnapshot, *, model: ThroughputModel) -> JobCurve:
    values = curve(
        points=job.throughput,
        ages=job.throughput_age_seconds,
        low=job.min_replicas,
        high=job.max_replicas,
        model=model,
    )
    return JobCurve(low=job.min_replicas, throughput=values)


def current_count(job: JobSnapshot) -> int:
    """The job's count, clamped into its bounds (bounds may have changed since it was set)."""
    return min(max(job.replicas, job.min_replicas), job.max_replicas)


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
    """The objective of a set of counts, exactly as `Objective` defines it.

    Jobs with no throughput data, or sized where their curve is unknown, have no speedup and are
    left out of the sum. `fitted`: the snapshot's curves when the caller has them already.
    """
    fitted = fitted if fitted is not None else curves(snapshot, model=model)
    speedups, weights = [], []
    for job in snapshot.jobs:
        curve = fitted[job.key]
        count = replicas.get(job.key, job.replicas)
        if curve.known and np.isfinite(curve.at(count)):
            speedups.append(curve.at(count) / curve.throughput[0])
            weights.append(job.weight)
    return objective.value(np.array(speedups), weights=np.array(weights))


def reporting(config: BaseModel | None) -> tuple[Objective, ThroughputModel]:
    """The objective and throughput model a policy's rounds are reported by: the policy's own
    when its config has them (as the global optimizer's does), else the defaults."""
    objective = getattr(config, "objective", None)
    model = getattr(config, "model", None)
    return (
        objective if isinstance(objective, Objective) else Objective(),
        model if isinstance(model, ThroughputModel) else ThroughputModel(),
    )
