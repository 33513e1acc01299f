"""The settle pipeline: a round's proposals to the counts the engine writes, in one order.

`settle_round` owns the order; the steps live in `queueing` (queue) and `settle` (the hold's
reasons, the job's own steps, the round-wide ones), each unaware of its place.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime

from autoscaler.engine.config import SettleConfig
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.queueing import queue
from autoscaler.engine.settle import (
    Settled,
    allowed_count,
    clamp,
    fit_capacity,
    limit_rescales,
    pending,
    rate_limit,
    stabilise,
)
from autoscaler.engine.state import JobState, Step

# Steps 3-7 of `settle_round`: each sees the count the one before left.
JOB_STEPS = (clamp, stabilise, rate_limit, allowed_count, pending)


def settle_round(
    jobs: Sequence[ManagedJob],
    states: Mapping[JobKey, JobState],
    *,
    proposals: Mapping[JobKey, Step],
    holds: Mapping[JobKey, Step | None],
    capacity: Mapping[str, float],
    now: datetime,
    config: SettleConfig,
) -> dict[JobKey, Settled]:
    """Each job's proposal (the policy's count, or its current one) to its settled count, pure.
    A step is recorded, after the proposal, only when it changes (or holds) the count. In order:

    1. queue: a 0 suspends the job or is its minimum; a held-back job stays, resumes or is forced
    2. hold: a job held this round (`holds`) keeps its count
    3. clamp: within the job's minimum and maximum
    4. stabilise: a scale-down no lower than the window's highest recommendation
    5. rate-limit: at most so many workers more or fewer than now
    6. allowed: the allowed count between now and the wish nearest the wish
    7. pending: no scale-up while the job's pods, gang or quota wait
    8. limit: at most `max_rescales_per_round`, scale-downs first; forced resumes go first, all
    9. capacity: scale-ups and resumes undone, largest first, till the counts fit; not forced ones

    A count queueing decides (1) skips 2-7, a held job 3-7; 8 and 9 see every job, so a forced
    resume is never deferred nor undone, and a scale-up that counted on a deferred scale-down
    is undone.
    """
    settled = {
        job.key: settle_job(
            job,
            states[job.key],
            proposal=proposals[job.key],
            held=holds[job.key],
            now=now,
            config=config,
        )
        for job in jobs
    }
    limited = limit_rescales(jobs, settled, states, limit=config.max_rescales_per_round)
    return fit_capacity(jobs, limited, capacity=capacity)


def settle_job(
    job: ManagedJob,
    state: JobState,
    *,
    proposal: Step,
    held: Step | None,
    now: datetime,
    config: SettleConfig,
) -> Settled:
    """One job's proposal through steps 1-7 of `settle_round` (the ones that need no other job)."""
    queued = queue(job, state, proposal=proposal, held=held, now=now, config=config)
    if queued.settled is not None:
        return queued.settled
    steps = [*queued.prefix, queued.proposal]
    if held is not None:
        return Settled(replicas=job.replicas, steps=(*steps, held))
    for rule in JOB_STEPS:
        step = rule(job, state, steps[-1].replicas, now=now, config=config)
        if step is not None:
            steps.append(step)
    return Settled(replicas=steps[-1].replicas, steps=tuple(steps))
