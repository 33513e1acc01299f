"""What a simulation run measured, per job and for the run, and each job's lower bound.

- JCT = finish - submit (queueing included). p95 is the nearest-rank percentile.
- makespan = end of the run (the last finish, or the horizon) - the first submission.
- GPU utilisation = GPU-seconds allocated to jobs while they train (restarts excluded) /
  (cluster GPUs x makespan).
- lower bound of a job's JCT: the job alone on the cluster from its arrival, at its best count in
  [min_replicas, max_replicas] (within the cluster's GPUs), with no restart: iterations / best rate.
- spread share = the share of job-rounds (a running job in a decision round, after the round's
  binding) whose workers sit on more nodes than ceil(workers x GPUs per worker / GPUs per node):
  how often the rates' packed placement is not what the pods got.
- the timeline: the GPUs bound to each running job, and how many of them train (not restarting),
  from every instant at which either changed to the next.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.policies.rounding import ceil_count
from autoscaler.sim.cluster import SimEvent
from autoscaler.sim.profiles import Profile
from autoscaler.sim.workload import WorkloadJob


@dataclass(frozen=True)
class JobResult:
    name: str
    profile: str
    status: str  # finished, running/queued (unfinished at the horizon), rejected
    submit: float  # seconds since the start
    start: float | None
    finish: float | None
    rescales: int  # suspensions included
    gpu_seconds: float  # allocated, restarts included
    busy_gpu_seconds: float  # allocated while training
    lower_bound: float | None  # JCT lower bound (None: cannot run at any allowed count)
    reason: str = ""  # why it was rejected
    suspensions: int = 0  # times the engine held it back

    @property
    def jct(self) -> float | None:
        return None if self.finish is None else self.finish - self.submit


@dataclass(frozen=True)
class Sample:
    """The cluster from `seconds` until the next sample."""

    seconds: float
    gpus: Mapping[str, int]  # GPUs bound to each running job
    training: int  # GPUs of the running jobs that are not restarting


@dataclass(frozen=True)
class RunResult:
    jobs: tuple[JobResult, ...]
    gpus: int
    first_submit: float
    end: float
    scale_writes: int
    events: tuple[SimEvent, ...] = ()
    timeline: tuple[Sample, ...] = ()
    job_rounds: int = 0  # running jobs summed over decision rounds
    spread_rounds: int = 0  # ... of them on more nodes than their GPUs fill

    def _jcts(self) -> list[float]:
        return sorted(job.jct for job in self.jobs if job.jct is not None)

    @property
    def finished(self) -> int:
        return len(self._jcts())

    @property
    def unfinished(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.jobs if j.finish is None and j.status != "rejected")

    @property
    def rejected(self) -> tuple[str, ...]:
        return tuple(job.name for job in self.jobs if job.status == "rejected")

    @property
    def mean_jct(self) -> float | None:
        jcts = self._jcts()
        return sum(jcts) / len(jcts) if jcts else None

    @property
    def p95_jct(self) -> float | None:
        return percentile(self._jcts(), 95.0)

    @property
    def makespan(self) -> float:
        return max(0.0, self.end - self.first_submit)

    @property
    def gpu_utilisation(self) -> float:
        capacity = self.gpus * self.makespan
        return sum(job.busy_gpu_seconds for job in self.jobs) / capacity if capacity else 0.0

    @property
    def spread_share(self) -> float | None:
        """Share of job-rounds spread over more nodes than needed (None: no job ever ran)."""
        return self.spread_rounds / self.job_rounds if self.job_rounds else None

    @property
    def rescales(self) -> int:
        return sum(job.rescales for job in self.jobs)

    @property
    def suspensions(self) -> int:
        return sum(job.suspensions for job in self.jobs)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of sorted `values` (None when empty)."""
    if not values:
        return None
    rank = max(1, ceil_count(q / 100.0 * len(values)))
    return values[rank - 1]


def best_rate(job: WorkloadJob, profile: Profile, *, total_gpus: int) -> tuple[int, float]:
    """(count, iterations/s) of the job's fastest allowed count that fits the cluster."""
    best = (0, 0.0)
    for count in range(job.min_replicas, job.max_replicas + 1):
        if count * job.gpus_per_replica > total_gpus:
            break
        rate = profile.throughput(job.batch_size, count, job.gpus_per_replica)
        if rate > best[1]:
            best = (count, rate)
    return best


def lower_bound(job: WorkloadJob, profile: Profile, *, total_gpus: int) -> float | None:
    """The JCT of the job alone from its arrival at its best count, with no restart."""
    _, rate = best_rate(job, profile, total_gpus=total_gpus)
    return job.iterations / rate if rate > 0 else None
