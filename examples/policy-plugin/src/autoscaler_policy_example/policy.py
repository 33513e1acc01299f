"""`weighted-fair-share`: split one resource between the jobs in proportion to their weights.

Water-filling, one worker at a time: every job starts at its minimum, and the next worker goes to
the job whose share of the resource per unit of weight would be the smallest with it. A job at its
maximum, or whose next worker no longer fits, stops growing, and what is left goes to the others.

Pure: no I/O, no clock (`now` is not needed), so the same snapshot always gives the same counts.
The module imports only the policy contract and pydantic, so it also works as a single file
(`policy.name: /etc/autoscaler/policies/policy.py`).
"""

import heapq
import math
from collections.abc import Sequence
from datetime import datetime

from pydantic import Field, NonNegativeFloat

from autoscaler.policies.contract import (
    Decision,
    JobSnapshot,
    PolicyConfig,
    PolicyPlugin,
    Reporting,
    Snapshot,
)

EPSILON = 1e-9  # amounts are floats (0.1 + 0.2 > 0.3): compare them with a tolerance


class WeightedFairShareConfig(PolicyConfig):
    resource: str = Field(default="nvidia.com/gpu", description="the capacity the jobs share")
    reserve: NonNegativeFloat = Field(
        default=0.0, description="amount of the resource kept free, e.g. for jobs about to start"
    )


class WeightedFairShare:
    """Every job's count from its weight, its bounds and what one of its workers requests."""

    # How the engine scores its rounds (decision log, objective metric, `autoscaler decide`).
    # Fair shares optimise no throughput objective of their own, so they are scored by the
    # default one, as the built-in baselines are: the numbers then compare with theirs.
    reporting = Reporting()

    def __init__(self, config: WeightedFairShareConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        resource = self.config.resource
        sharing = [job for job in snapshot.jobs if self._size(job) > 0]
        available = snapshot.capacity.get(resource, math.inf) - self.config.reserve
        needed = sum(job.min_replicas * self._size(job) for job in sharing)
        if needed > available + EPSILON:
            message = (
                f"the minimums need {needed:g} {resource}, only {available:g} is available:"
                " keeping every count"
            )
            shared = {job.key: _keep(job, "InsufficientCapacity", message) for job in sharing}
        else:
            counts = self._fill(sharing, free=available - needed)
            total_weight = sum(job.weight for job in sharing)
            shared = {
                job.key: self._decision(
                    job, counts[job.key], available=available, total_weight=total_weight
                )
                for job in sharing
            }
        unrequested = f"requests no {resource}: keeping the count"
        return [
            shared.get(job.key) or _keep(job, "ResourceNotRequested", unrequested)
            for job in snapshot.jobs
        ]

    def _fill(self, jobs: Sequence[JobSnapshot], *, free: float) -> dict[tuple[str, str], int]:
        """Worker counts from the minimums up: the next worker to the lowest share per weight."""
        counts = {job.key: job.min_replicas for job in jobs}
        by_key = {job.key: job for job in jobs}
        # (share per weight with one more worker, key): the key breaks ties, so the order of the
        # jobs in the snapshot never matters. A job's entry only changes when it gains a worker.
        queue = [
            (self._share(job, job.min_replicas + 1), job.key)
            for job in jobs
            if job.max_replicas > job.min_replicas
        ]
        heapq.heapify(queue)
        while queue:
            _, key = heapq.heappop(queue)
            job = by_key[key]
            size = self._size(job)
            if size > free + EPSILON:
                continue  # it never fits again: what is free only shrinks; smaller jobs may fit
            counts[key] += 1
            free -= size
            if counts[key] < job.max_replicas:
                heapq.heappush(queue, (self._share(job, counts[key] + 1), key))
        return counts

    def _decision(
        self, job: JobSnapshot, count: int, *, available: float, total_weight: float
    ) -> Decision:
        resource = self.config.resource
        held = count * self._size(job)
        unlimited = not math.isfinite(available)
        limit = f"{resource} (no limit)" if unlimited else f"of {available:g} {resource}"
        workers = "1 worker holds" if count == 1 else f"{count} workers hold"
        message = f"{workers} {held:g} {limit}, for weight {job.weight:g} of {total_weight:g}"
        if count == job.max_replicas:
            message += ": at the job's maximum"
        return Decision(job.namespace, job.name, count, "FairShare", message)

    def _size(self, job: JobSnapshot) -> float:
        return job.resources_per_replica.get(self.config.resource, 0.0)

    def _share(self, job: JobSnapshot, count: int) -> float:
        return count * self._size(job) / job.weight


def _keep(job: JobSnapshot, reason: str, message: str) -> Decision:
    """The job's current count, inside its bounds (they may have changed since it was set)."""
    count = min(max(job.replicas, job.min_replicas), job.max_replicas)
    return Decision(job.namespace, job.name, count, reason, message)


PLUGIN = PolicyPlugin(
    name="weighted-fair-share",
    summary="split one resource in proportion to job weights, water-filling up to each maximum",
    config_model=WeightedFairShareConfig,
    build=WeightedFairShare,
)
