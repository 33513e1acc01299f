"""Waiting jobs (pure): which jobs wait for the policy to start them, and the curve a policy
sizes one by before the engine observes it.

A job waits while no worker of it runs: the engine holds it back, or it is preemptible and has
not started yet (no worker ever ran, none is placed). The policy decides when it starts and at
what count, or leaves it at 0 (held back); queueing's starvation bound still resumes a held-back
one. A job that is not preemptible starts as it always did: at its count, once its pods fit.

A waiting job's curve, in this order: the samples/s it declared (its throughput-profile
annotation); else its own earlier observations (the snapshot's `throughput`, which the policy
fits and explores as it does a running job's: no model curve); else the engine's
`waiting_prior` (none by default); else none (the policy keeps it at its count, as it keeps any
job it knows nothing of).
"""

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.state import JobState
from autoscaler.policies.contract import ModelCurve

Resources = tuple[tuple[str, float], ...]  # a worker's requests, sorted: jobs of one hardware


def unstarted(job: ManagedJob, state: JobState) -> bool:
    """No worker of the job has run yet and none is placed: it waits for its first start."""
    placed = job.active > 0 or job.unready > 0
    ran = state.attained_seconds > 0 or bool(state.throughput)
    return not job.suspended and not placed and not ran


def waiting(job: ManagedJob, state: JobState) -> bool:
    """Held back by the engine, or preemptible and not started yet: the policy starts it."""
    return job.held_back or (job.preemptible and unstarted(job, state))


def resources(job: ManagedJob) -> Resources:
    return tuple(sorted(job.resources_per_replica.items()))


def per_worker_rates(
    jobs: Sequence[ManagedJob], states: Mapping[JobKey, JobState]
) -> dict[Resources, float]:
    """The default prior's rate: the median samples/s per worker of the running jobs, each at
    its latest observation, by resources per worker (the same hardware)."""
    rates: dict[Resources, list[float]] = defaultdict(list)
    for job in jobs:
        points = states[job.key].throughput
        if job.held_back or job.active == 0 or not points:
            continue
        count, point = max(points.items(), key=lambda item: item[1].observed_at)
        rates[resources(job)].append(point.samples_per_second / count)
    return {key: statistics.median(values) for key, values in rates.items()}


def declared_curve(job: ManagedJob) -> ModelCurve | None:
    """The samples/s the job declared (its throughput-profile annotation), as a model curve."""
    if not job.throughput_profile:
        return None
    return ModelCurve(source="declared", values=dict(job.throughput_profile))


def prior_curve(
    job: ManagedJob, state: JobState, *, counts: Iterable[int], rates: Mapping[Resources, float]
) -> ModelCurve | None:
    """A waiting job's model curve, at `counts` (a prior's): declared, else none while it has
    observations of its own, else linear scaling at its hardware's median per-worker rate
    (optimistic, as exploring past observations is), else none."""
    declared = declared_curve(job)
    if declared is not None:
        return declared
    rate = rates.get(resources(job))
    if state.throughput or rate is None:
        return None
    return ModelCurve(source="prior", values={n: rate * n for n in counts})
