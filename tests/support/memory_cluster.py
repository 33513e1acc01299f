"""An in-memory cluster and throughput source that drive the real `Engine` without servers."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import JobKey, ManagedJob, Progress, ScaleResult

START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"


@dataclass
class MemoryCluster:
    """Jobs whose pods start at once; records every write, state and Event."""

    jobs_: dict[JobKey, ManagedJob]
    gpus: float = 16.0
    writes: list[tuple[str, int]] = field(default_factory=list)
    events: list[tuple[str, str, bool]] = field(default_factory=list)  # (job, reason, warning)
    messages: list[tuple[str, str]] = field(default_factory=list)  # (job, message) of each Event
    states: dict[JobKey, str] = field(default_factory=dict)
    saves: list[str] = field(default_factory=list)  # the job of each state write, in order
    fail_writes: bool = False

    def jobs(self) -> Sequence[ManagedJob]:
        return [replace(job, state=self.states.get(key, "")) for key, job in self.jobs_.items()]

    def capacity(self) -> Mapping[str, float]:
        return {GPU: self.gpus}

    def scale(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        if self.fail_writes:
            return ScaleResult(written=False, replicas=job.replicas, error="HTTP 500: boom")
        self.writes.append((job.name, replicas))
        self.jobs_[job.key] = replace(job, replicas=replicas, active=replicas)
        return ScaleResult(written=True, replicas=replicas)

    def suspend(self, job: ManagedJob, *, since: datetime) -> ScaleResult:
        if self.fail_writes:
            return ScaleResult(written=False, replicas=job.replicas, error="HTTP 500: boom")
        self.writes.append((job.name, 0))
        self.jobs_[job.key] = replace(job, suspended=True, held_since=since, active=0)
        return ScaleResult(written=True, replicas=job.replicas)

    def resume(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        if self.fail_writes:
            return ScaleResult(written=False, replicas=job.replicas, error="HTTP 500: boom")
        self.writes.append((job.name, replicas))
        resumed = replace(job, replicas=replicas, active=replicas, suspended=False, held_since=None)
        self.jobs_[job.key] = resumed
        return ScaleResult(written=True, replicas=replicas)

    def save_state(self, job: ManagedJob, *, state: str) -> None:
        self.states[job.key] = state
        self.saves.append(job.name)

    def event(self, job: ManagedJob, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((job.name, reason, warning))
        self.messages.append((job.name, message))


@dataclass
class CurveThroughput:
    """Each job's samples/s at its current count, from a curve per job."""

    cluster: MemoryCluster
    curves: dict[str, Callable[[int], float]]
    broken: bool = False
    failing: dict[str, str] = field(default_factory=dict)  # job name -> why its query fails

    def read(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, float | None]:
        if self.broken:
            raise ConnectionError("prometheus is down")
        return {
            job.key: None if job.name in self.failing else self.curves[job.name](job.replicas)
            for job in jobs
        }

    def progress(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, Progress]:
        return {}  # these jobs report no progress: the engine integrates their throughput

    @property
    def last_errors(self) -> Mapping[JobKey, str]:
        return {("ns", name): why for name, why in self.failing.items()}

    @property
    def window_seconds(self) -> float:
        return 0.0  # the curve at the count the job has, at once


def make_job(
    name: str, *, replicas: int = 2, owner: Owner = Owner.ENGINE, **changes: object
) -> ManagedJob:
    """A running elastic job in namespace `ns`: 1 to 8 workers of 2 GPUs, an hour old."""
    return ManagedJob(
        namespace="ns",
        name=name,
        min_replicas=1,
        max_replicas=8,
        replicas=replicas,
        active=replicas,
        owner=owner,
        created=START - timedelta(hours=1),
        resources_per_replica={GPU: 2.0},
        **changes,  # type: ignore[arg-type]
    )
