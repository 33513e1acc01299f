"""Baseline policies to compare the global optimizer with: `static`, `equal-share`, `hpa-like`,
`least-attained-service`."""

import math
from collections.abc import Sequence
from datetime import datetime

from pydantic import Field, PositiveFloat

from autoscaler.policies.contract import (
    Decision,
    JobSnapshot,
    PolicyConfig,
    PolicyPlugin,
    Reporting,
    Snapshot,
)
from autoscaler.policies.global_optimizer import GPU
from autoscaler.policies.rounding import ceil_count
from autoscaler.policies.speedup import current_count, job_curve, smallest
from autoscaler.policies.throughput_model import EXPLORING, ThroughputModel


class StaticConfig(PolicyConfig):
    pass


class Static:
    """Keeps every job at the count it has (what a user asked for)."""

    def __init__(self, config: StaticConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        return [
            Decision(
                job.namespace,
                job.name,
                nearest_allowed(job, current_count(job)),
                "Static",
                "keeping the count",
            )
            for job in snapshot.jobs
        ]


class EqualShareConfig(PolicyConfig):
    resource: str = Field(default=GPU, description="the capacity the jobs share")


class EqualShare:
    """Water-filling: the next worker goes to the job holding the least of the resource."""

    def __init__(self, config: EqualShareConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        counts = {job.key: smallest(job) for job in snapshot.jobs}
        sizes = {
            job.key: job.resources_per_replica.get(self.config.resource, 0.0)
            for job in snapshot.jobs
        }
        free = snapshot.capacity.get(self.config.resource, math.inf) - sum(
            counts[key] * sizes[key] for key in counts
        )
        growing = [job for job in snapshot.jobs if larger(job, counts[job.key]) is not None]
        while growing:
            job = min(growing, key=lambda j: (counts[j.key] * sizes[j.key], counts[j.key]))
            step = larger(job, counts[job.key])
            if step is None or (step - counts[job.key]) * sizes[job.key] > free:
                growing.remove(job)
                continue
            free -= (step - counts[job.key]) * sizes[job.key]
            counts[job.key] = step
        return [
            Decision(job.namespace, job.name, counts[job.key], "EqualShare", "an equal share")
            for job in snapshot.jobs
        ]


class LeastAttainedServiceConfig(PolicyConfig):
    resource: str = Field(default=GPU, description="the capacity the jobs share")


class LeastAttainedService:
    """Least attained service first, at the sizes users asked for.

    In order of attained service (least first, then oldest), each job gets the count it was
    submitted with (its requested count, within its bounds and allowed counts) if that still
    fits, else its smallest: a job is never sized by its curve. A continuous sort, not Tiresias
    (NSDI'19): no discretised queues, thresholds, starvation promotion or suspension.
    """

    def __init__(self, config: LeastAttainedServiceConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        size = {job.key: job.resources_per_replica.get(self.config.resource, 0.0)
                for job in snapshot.jobs}  # fmt: skip
        free = snapshot.capacity.get(self.config.resource, math.inf) - sum(
            smallest(job) * size[job.key] for job in snapshot.jobs
        )
        decisions = []
        for job in sorted(snapshot.jobs, key=lambda j: (j.attained_seconds, older_first(j))):
            asked = nearest_allowed(job, min(job.requested_replicas or job.replicas,
                                             job.max_replicas))  # fmt: skip
            extra = (asked - smallest(job)) * size[job.key]
            fits = extra <= free
            free -= extra if fits else 0.0
            count = asked if fits else smallest(job)
            reason = "LeastAttainedService" if fits else "MoreAttainedService"
            message = f"{job.attained_seconds:.0f} worker-seconds attained"
            decisions.append(Decision(job.namespace, job.name, count, reason, message))
        return decisions


def larger(job: JobSnapshot, count: int) -> int | None:
    """The next count the job may run at above `count`, if any."""
    return next((n for n in range(count + 1, job.max_replicas + 1) if job.allows(n)), None)


def older_first(job: JobSnapshot) -> float:
    """A sort key that puts older jobs first; a job whose age is unknown sorts as just created."""
    return -(job.age_seconds or 0.0)


def nearest_allowed(job: JobSnapshot, count: int) -> int:
    """`count` if allowed, else the largest allowed count below it, else the smallest."""
    below = [n for n in range(job.min_replicas, count + 1) if job.allows(n)]
    return below[-1] if below else smallest(job)


class HpaLikeConfig(PolicyConfig):
    target_efficiency: PositiveFloat = Field(
        default=0.8, le=1.0, description="per-worker throughput wanted, relative to the minimum's"
    )
    tolerance: float = Field(default=0.1, ge=0, description="no change within this ratio of 1")
    model: ThroughputModel = EXPLORING


class HpaLike:
    """The HPA's rule per job, capacity-blind: desired = ceil(n · efficiency / target)."""

    def __init__(self, config: HpaLikeConfig) -> None:
        self.config = config
        # Scored by the default objective, on the curves its efficiencies come from.
        self.reporting = Reporting(model=config.model)

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        return [self._one(job) for job in snapshot.jobs]

    def _one(self, job: JobSnapshot) -> Decision:
        current = current_count(job)
        curve = job_curve(job, model=self.config.model)
        per_worker = curve.at(current) / current
        if not curve.known or not math.isfinite(per_worker):
            return Decision(job.namespace, job.name, current, "NoThroughputData", "no throughput")
        efficiency = per_worker / (curve.throughput[0] / job.min_replicas)
        ratio = efficiency / self.config.target_efficiency
        target = self.config.target_efficiency
        message = f"scaling efficiency {efficiency:.2f} against a target of {target}"
        if abs(ratio - 1) <= self.config.tolerance:
            return Decision(job.namespace, job.name, current, "WithinTolerance", message)
        wanted = min(max(ceil_count(current * ratio), job.min_replicas), job.max_replicas)
        desired = nearest_allowed(job, wanted)
        reason = "ScaleUp" if desired > current else "ScaleDown" if desired < current else "AtLimit"
        return Decision(job.namespace, job.name, desired, reason, message)


STATIC = PolicyPlugin(
    name="static", summary="keep every job's count", config_model=StaticConfig, build=Static
)
EQUAL_SHARE = PolicyPlugin(
    name="equal-share",
    summary="split the capacity evenly between jobs",
    config_model=EqualShareConfig,
    build=EqualShare,
)
LEAST_ATTAINED_SERVICE = PolicyPlugin(
    name="least-attained-service",
    summary="least attained service first, each job at its requested or smallest count",
    config_model=LeastAttainedServiceConfig,
    build=LeastAttainedService,
)
HPA_LIKE = PolicyPlugin(
    name="hpa-like",
    summary="the HPA ratio rule per job on scaling efficiency, with its tolerance",
    config_model=HpaLikeConfig,
    build=HpaLike,
)
