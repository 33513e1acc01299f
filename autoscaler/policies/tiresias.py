"""`tiresias`: two-queue discretised least-attained-service (Gu et al., "Tiresias", NSDI'19), as
Pollux's paper ran it as a baseline.

A job whose attained service (GPU-hours) is below the threshold (16 GPU-hours, the paper's) is in
the high-priority queue, else in the low one; within a queue jobs are served first come, first
served. In that order each job gets the count it was submitted with (a gang: all or nothing) if it
still fits; one that does not is held back (0) when it is preemptible, else kept at its smallest.
Starvation promotion is off, as in Pollux's runs. A job is never sized by its curve.
"""

import math
from collections.abc import Sequence
from datetime import datetime

from pydantic import Field, PositiveFloat

from autoscaler.policies.baselines import nearest_allowed, older_first
from autoscaler.policies.contract import Decision, JobSnapshot, PolicyConfig, PolicyPlugin, Snapshot
from autoscaler.policies.global_optimizer import GPU
from autoscaler.policies.speedup import smallest

SECONDS_PER_HOUR = 3600.0


class TiresiasConfig(PolicyConfig):
    resource: str = Field(default=GPU, description="the capacity the jobs share")
    threshold_gpu_hours: PositiveFloat = Field(
        default=16.0, description="attained service (resource-hours) past which a job drops"
        " to the low-priority queue",
    )  # fmt: skip


class Tiresias:
    def __init__(self, config: TiresiasConfig) -> None:
        self.config = config

    def _queue(self, job: JobSnapshot) -> int:
        size = job.resources_per_replica.get(self.config.resource, 1.0)
        attained = job.attained_seconds * size / SECONDS_PER_HOUR
        return 0 if attained < self.config.threshold_gpu_hours else 1

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        free = snapshot.capacity.get(self.config.resource, math.inf)
        held = [job for job in snapshot.jobs if not job.preemptible]
        size = {job.key: job.resources_per_replica.get(self.config.resource, 0.0)
                for job in snapshot.jobs}  # fmt: skip
        free -= sum(smallest(job) * size[job.key] for job in held)
        decisions = []
        for job in sorted(snapshot.jobs, key=lambda j: (self._queue(j), older_first(j))):
            asked = nearest_allowed(job, min(job.requested_replicas or job.replicas,
                                             job.max_replicas))  # fmt: skip
            floor = 0 if job.preemptible else smallest(job)
            extra = (asked - floor) * size[job.key]
            fits = extra <= free + 1e-9
            free -= extra if fits else 0.0
            queue = "high" if self._queue(job) == 0 else "low"
            reason = "TiresiasRunning" if fits else "TiresiasWaiting"
            message = f"{queue}-priority queue, {job.attained_seconds:.0f} worker-seconds attained"
            decisions.append(
                Decision(job.namespace, job.name, asked if fits else floor, reason, message)
            )
        return decisions


TIRESIAS = PolicyPlugin(
    name="tiresias",
    summary="two-queue discretised least-attained-service at the requested sizes (Tiresias)",
    config_model=TiresiasConfig,
    build=Tiresias,
)
