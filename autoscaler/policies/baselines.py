"""Baseline policies to compare the global optimizer with: `static`, `equal-share`, `hpa-like`."""

import math
from collections.abc import Sequence
from datetime import datetime

from pydantic import Field, PositiveFloat

from autoscaler.policies.contract import Decision, JobSnapshot, PolicyConfig, PolicyPlugin, Snapshot
from autoscaler.policies.global_optimizer import GPU
from autoscaler.policies.speedup import current_count, job_curve
from autoscaler.policies.throughput_model import ThroughputModel


class StaticConfig(PolicyConfig):
    pass


class Static:
    """Keeps every job at the count it has (what a user asked for)."""

    def __init__(self, config: StaticConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        return [
            Decision(job.namespace, job.name, current_count(job), "Static", "keeping the count")
            for job in snapshot.jobs
        ]


class EqualShareConfig(PolicyConfig):
    resource: str = Field(default=GPU, description="the capacity the jobs share")


class EqualShare:
    """Water-filling: the next worker goes to the job holding the least of the resource."""

    def __init__(self, config: EqualShareConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        counts = {job.key: job.min_replicas for job in snapshot.jobs}
        sizes = {
            job.key: job.resources_per_replica.get(self.config.resource, 0.0)
            for job in snapshot.jobs
        }
        free = snapshot.capacity.get(self.config.resource, math.inf) - sum(
            counts[key] * sizes[key] for key in counts
        )
        growing = [job for job in snapshot.jobs if job.max_replicas > job.min_replicas]
        while growing:
            job = min(growing, key=lambda j: (counts[j.key] * sizes[j.key], counts[j.key]))
            if sizes[job.key] > free or counts[job.key] == job.max_replicas:
                growing.remove(job)
                continue
            counts[job.key] += 1
            free -= sizes[job.key]
        return [
            Decision(job.namespace, job.name, counts[job.key], "EqualShare", "an equal share")
            for job in snapshot.jobs
        ]


class HpaLikeConfig(PolicyConfig):
    target_efficiency: PositiveFloat = Field(
        default=0.8, le=1.0, description="per-worker throughput wanted, relative to the minimum's"
    )
    tolerance: float = Field(default=0.1, ge=0, description="no change within this ratio of 1")
    model: ThroughputModel = ThroughputModel()


class HpaLike:
    """The HPA's rule per job, capacity-blind: desired = ceil(n · efficiency / target)."""

    def __init__(self, config: HpaLikeConfig) -> None:
        self.config = config

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
        desired = min(max(math.ceil(current * ratio), job.min_replicas), job.max_replicas)
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
HPA_LIKE = PolicyPlugin(
    name="hpa-like",
    summary="the HPA ratio rule per job on scaling efficiency, with its tolerance",
    config_model=HpaLikeConfig,
    build=HpaLike,
)
