"""Lower bounds of a workload's figures that no policy can beat.

- a job's JCT >= iterations / its best rate: alone on the cluster from its arrival, at its best
  count in [min_replicas, max_replicas] within the cluster's GPUs, never restarted
  (`results.lower_bound`; with goodput, epoch by epoch: `goodput.alone_seconds`);
- mean and p95 JCT >= the mean and the nearest-rank p95 of those per-job bounds (the k-th smallest
  JCT is at least the k-th smallest bound, since every JCT is at least its own bound);
- makespan >= the larger of: the last (arrival + job bound), and the cluster's GPUs busy with the
  least GPU-time each job needs (iterations / its best rate per GPU). The second term is the
  classic work bound `Σ work_j / C` (C GPUs), applied to every suffix of arrivals: the jobs
  arriving at or after `a` cannot start before `a`, so
  makespan >= (a - first arrival) + Σ_{submit_j >= a} work_j / C.

Jobs the cluster can never run (rejected at arrival) are left out: no policy runs them either.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.sim.profiles import Profile
from autoscaler.sim.results import lower_bound, percentile
from autoscaler.sim.workload import WorkloadJob


@dataclass(frozen=True)
class LowerBound:
    jobs: Mapping[str, float]  # each runnable job's JCT bound, seconds
    mean_jct: float | None
    p95_jct: float | None
    makespan: float


def tightest(bound: float | None, given: float | None) -> float | None:
    """The larger of a job's profile bound and a tighter one `given` (goodput's), if any; None
    while the profile says it cannot run."""
    return bound if bound is None or given is None else max(bound, given)


def least_gpu_seconds(job: WorkloadJob, profile: Profile, *, total_gpus: int) -> float | None:
    """The GPU-time of the job at its most GPU-efficient allowed count (None: it cannot run)."""
    best = 0.0  # iterations/s per GPU
    for count in range(job.min_replicas, job.max_replicas + 1):
        gpus = count * job.gpus_per_replica
        if gpus > total_gpus:
            break
        best = max(best, profile.throughput(job.batch_size, count, job.gpus_per_replica) / gpus)
    return job.iterations / best if best > 0 else None


def workload_bound(
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    *,
    total_gpus: int,
    rejected: Collection[str] = (),
    alone: Mapping[str, float] | None = None,
) -> LowerBound:
    """The bounds of the jobs not in `rejected` on a cluster of `total_gpus` GPUs; `alone`: a
    tighter JCT bound of some jobs than their profile gives (goodput's, by epoch)."""
    runnable = [job for job in workload if job.name not in rejected]
    bounds: dict[str, float] = {}
    work: list[tuple[float, float]] = []  # (arrival, least GPU-seconds)
    for job in runnable:
        profile = profiles[job.profile]
        given = (alone or {}).get(job.name)
        bound = tightest(lower_bound(job, profile, total_gpus=total_gpus), given)
        gpu_seconds = least_gpu_seconds(job, profile, total_gpus=total_gpus)
        if bound is not None and gpu_seconds is not None:
            bounds[job.name] = bound
            work.append((job.submit_time, gpu_seconds))
    values = sorted(bounds.values())
    return LowerBound(
        jobs=bounds,
        mean_jct=sum(values) / len(values) if values else None,
        p95_jct=percentile(values, 95.0),
        makespan=_makespan(runnable, bounds, work, total_gpus=total_gpus),
    )


def _makespan(
    jobs: Sequence[WorkloadJob],
    bounds: Mapping[str, float],
    work: list[tuple[float, float]],
    *,
    total_gpus: int,
) -> float:
    if not bounds:
        return 0.0
    first = min(job.submit_time for job in jobs if job.name in bounds)
    alone = max(job.submit_time + bounds[job.name] for job in jobs if job.name in bounds)
    busy, left = 0.0, sum(seconds for _, seconds in work)
    for arrival, seconds in sorted(work):
        busy = max(busy, arrival + left / total_gpus)
        left -= seconds
    return max(alone, busy) - first
