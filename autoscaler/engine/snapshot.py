"""The snapshot a policy sees, built from what the engine observed and remembers (pure)."""

from collections.abc import Mapping, Sequence
from datetime import datetime

from autoscaler.engine.config import SettleConfig, WaitingPrior
from autoscaler.engine.goodput import priced_snapshot
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.settle import restarts_left
from autoscaler.engine.state import JobState, Step
from autoscaler.engine.waiting import (
    Resources,
    declared_curve,
    per_worker_rates,
    prior_curve,
    waiting,
)
from autoscaler.policies.contract import EngineBounds, Goodput, JobSnapshot, Snapshot


def job_snapshot(
    job: ManagedJob,
    state: JobState,
    *,
    now: datetime,
    restart_seconds: float | None = None,
    rates: Mapping[Resources, float] | None = None,
    trust_declared: bool = False,
) -> JobSnapshot:
    """The job as a policy sees it; a waiting job with its prior curve (`rates`: the default
    prior's, `per_worker_rates`); `trust_declared`: a running job with its declared curve too."""
    highest, allowed = reachable(job)
    waits = waiting(job, state)
    counts = allowed or range(job.min_replicas, highest + 1)
    return JobSnapshot(
        namespace=job.namespace,
        name=job.name,
        min_replicas=job.min_replicas,
        max_replicas=highest,
        replicas=job.replicas,
        resources_per_replica=dict(job.resources_per_replica),
        weight=job.weight,
        throughput={n: p.samples_per_second for n, p in state.throughput.items()},
        throughput_age_seconds={
            n: max(0.0, (now - p.observed_at).total_seconds()) for n, p in state.throughput.items()
        },
        age_seconds=max(0.0, (now - job.created).total_seconds()),
        seconds_since_rescale=None
        if state.last_rescale is None
        else max(0.0, (now - state.last_rescale).total_seconds()),
        rescales=state.rescales,
        restart_seconds=job.restart_seconds if job.restart_seconds is not None else restart_seconds,
        restarts_remaining=restarts_left(job, state),
        remaining_samples=None
        if job.total_samples is None
        else max(0.0, job.total_samples - state.samples_done),
        attained_seconds=state.attained_seconds,
        requested_replicas=state.requested,
        allowed_replicas=allowed,
        waiting=waits,
        curve=prior_curve(job, state, counts=counts, rates=rates or {})
        if waits
        else (declared_curve(job) if trust_declared else None),
    )


def reachable(job: ManagedJob) -> tuple[int, tuple[int, ...] | None]:
    """The highest count and the allowed counts a job can reach without waiting: under Kueue, a
    scale-up past its quota's free room would wait for another job's quota for a time nobody
    knows, so it is not offered; the job's bounds otherwise."""
    if job.quota_headroom is None:
        return job.max_replicas, job.allowed_replicas
    highest = min(job.max_replicas, max(job.min_replicas, job.replicas + job.quota_headroom))
    allowed = job.allowed_replicas
    if allowed is None:
        return highest, None
    within = tuple(n for n in allowed if n <= highest)
    return (highest, within) if within else (job.max_replicas, allowed)


def snapshot(
    jobs: Sequence[ManagedJob],
    states: Mapping[JobKey, JobState],
    *,
    capacity: Mapping[str, float],
    now: datetime,
    restart_seconds: float,
    goodput: Mapping[JobKey, Goodput] | None = None,
    bounds: EngineBounds | None = None,
    prior: WaitingPrior = "none",
    trust_declared: bool = False,
) -> Snapshot:
    """Every job as a policy sees it; a job in `goodput` with its goodput curve; `bounds`: what
    the engine will enforce on the decisions; `prior`: the curve of a waiting job that has none
    (`EngineConfig.waiting_prior`); `trust_declared`: `EngineConfig.trust_declared_profiles`."""
    rates = per_worker_rates(jobs, states) if prior == "running-median" else {}
    views = [
        job_snapshot(
            job,
            states[job.key],
            now=now,
            restart_seconds=restart_seconds,
            rates=rates,
            trust_declared=trust_declared,
        )
        for job in jobs
    ]
    priced = goodput or {}
    return Snapshot(
        capacity=dict(capacity),
        jobs=[priced_snapshot(v, priced[v.key]) if v.key in priced else v for v in views],
        bounds=bounds,
    )


def engine_bounds(settle: SettleConfig, *, interval_seconds: float) -> EngineBounds:
    """The settle steps' limits as a policy reads them."""
    return EngineBounds(
        interval_seconds=interval_seconds,
        max_held_seconds=settle.max_held_seconds,
        min_run_seconds=settle.min_run_seconds,
        cooldown_seconds=settle.cooldown_seconds,
        scale_down_stabilization_seconds=settle.scale_down_stabilization_seconds,
        scale_up_max_pods=settle.scale_up_max_pods,
        scale_up_max_percent=settle.scale_up_max_percent,
        scale_down_max_percent=settle.scale_down_max_percent,
        max_rescales_per_round=settle.max_rescales_per_round,
    )


def pinned(view: Snapshot, holds: Mapping[JobKey, Step | None]) -> Snapshot:
    """The snapshot a policy is given: a held job is presented with min = max = its count, so
    the others are planned around it."""
    jobs = [
        job.model_copy(
            update={
                "min_replicas": job.replicas,
                "max_replicas": job.replicas,
                "allowed_replicas": None,
            }
        )
        if holds.get(job.key)
        else job
        for job in view.jobs
    ]
    return view.model_copy(update={"jobs": jobs})
