"""The engine's view of the outside world: small interfaces with a real and a simulated side.

`autoscaler.clients` implements them against Kubernetes and Prometheus, `autoscaler.sim` against
the simulated cluster; the engine cannot tell the two apart.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Protocol

from autoscaler.api.ownership import Owner

JobKey = tuple[str, str]  # (namespace, name)


# Each owner's CamelCase reason, as Kubernetes conditions spell reasons: in `explain`, and counted
# as the round's decision for the jobs the engine leaves to others.
OWNER_REASONS: Mapping[Owner, str] = {
    Owner.ENGINE: "ManagedByEngine",
    Owner.HPA: "ManagedByHPA",
    Owner.OPTED_OUT: "OptedOut",
    Owner.KUEUE: "ManagedByKueue",
}


@dataclass(frozen=True)
class ManagedJob:
    """An elastic job as read from the cluster, before any decision: typed at the edge
    (`autoscaler.clients.jobs` from Kubernetes JSON, `autoscaler.sim` from its own state)."""

    namespace: str
    name: str
    min_replicas: int
    max_replicas: int
    replicas: int  # spec (what /scale reports)
    active: int  # running workers (status)
    owner: Owner
    created: datetime
    resources_per_replica: Mapping[str, float] = field(default_factory=dict)
    weight: float = 1.0
    max_restarts: int | None = None  # torchrun's restart budget per worker; None = unlimited
    restart_seconds: float | None = None  # its own stall of one rescale; None = the engine's
    finished: bool = False
    state: str = ""  # the engine's persisted state (annotation JSON), "" when none
    uid: str = ""
    total_samples: float | None = None  # the work the job declared; None = not declared
    allowed_replicas: tuple[int, ...] | None = None  # the only counts it may run at; None = all
    throughput_query: str | None = None  # its own samples/s query template; None = the engine's
    # Its samples/s by worker count as it declared them (its throughput-profile); None = none.
    throughput_profile: Mapping[int, float] | None = None
    problems: tuple[str, ...] = ()  # annotations ignored because they are invalid, and why
    queue: str = ""  # the Kueue LocalQueue it is labelled for; "" when none
    # Gang scheduling: the job's PodGroup is not placed yet (its pods wait all-or-nothing).
    gang_waiting: bool = False
    # Kueue: a scale-up waits for its Workload slice to be admitted (the admitted workers run).
    quota_waiting: bool = False
    # Kueue: the workers more its ClusterQueue's free quota admits now; None = not limited.
    quota_headroom: int | None = None
    # The resourceVersion it was read at: a /scale write under it is refused (409) if the job
    # changed since. "" when unknown (the simulator has no versions).
    resource_version: str = ""
    # Queueing: the job lets the engine hold it back (0 workers); its spec's suspend; when the
    # engine suspended it (its marker annotation; None with `suspended`: the user's suspension).
    preemptible: bool = False
    suspended: bool = False
    held_since: datetime | None = None
    # The world's health, from its worker pods: those placed on a node but not Ready (starting,
    # restarting, leaving, or on a node that stopped reporting), and their containers' restarts
    # summed. 0 where nothing is observed (the simulator's workers never fail).
    unready: int = 0
    restarts: int = 0

    @cached_property
    def key(self) -> JobKey:  # read ~40 times per job and round: built once
        return (self.namespace, self.name)

    @property
    def held_back(self) -> bool:
        """Suspended by the engine (not by its user): waiting for the engine to resume it."""
        return self.suspended and self.held_since is not None


@dataclass(frozen=True)
class HpaCondition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class HpaStatus:
    """A job's HorizontalPodAutoscaler as `explain` shows it (HPA-owned jobs only)."""

    name: str
    desired_replicas: int | None
    conditions: tuple[HpaCondition, ...] = ()


@dataclass(frozen=True)
class ScaleResult:
    written: bool
    replicas: int  # the count now in the job's spec
    error: str = ""  # empty on success


class Cluster(Protocol):
    """Where jobs live and how the engine changes them."""

    def jobs(self) -> Sequence[ManagedJob]: ...

    def capacity(self) -> Mapping[str, float]:
        """Resources the engine may hand out: allocatable minus what jobs it does not size use."""
        ...

    def scale(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        """Write the worker count through /scale (only if `job.replicas` is still current)."""
        ...

    def suspend(self, job: ManagedJob, *, since: datetime) -> ScaleResult:
        """Hold the job back: its suspend set and the engine's marker (`since`) in one write,
        only if the job is still as read (its count is left as it is)."""
        ...

    def resume(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        """Resume a job the engine held back: the count, suspend unset and the marker removed in
        one write, only if the job is still as read."""
        ...

    def save_state(self, job: ManagedJob, *, state: str) -> ManagedJob | None:
        """Persist the engine's state of a job (an annotation), so a new leader resumes it.
        Returns the job as the save left it (its new version), or None when not known."""
        ...

    def event(
        self, job: ManagedJob, *, reason: str, message: str, warning: bool = False
    ) -> None: ...


@dataclass(frozen=True)
class Progress:
    """How far a job says it is (the training helper's gauges); None where it does not say."""

    samples_done: float | None = None  # samples trained so far, counting every incarnation
    total_samples: float | None = None  # samples it trains in all


class ThroughputSource(Protocol):
    """Training throughput (samples/s) of each job over the recent window, None when unknown."""

    def read(
        self, jobs: Sequence[ManagedJob], *, now: datetime
    ) -> Mapping[JobKey, float | None]: ...

    def progress(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, Progress]:
        """What the jobs report of their progress; a job that reports nothing may be left out."""
        ...

    @property
    def last_errors(self) -> Mapping[JobKey, str]:
        """Why each job of the latest `read` has no value, for the jobs whose query failed (a job
        that simply has no data yet is not listed)."""
        ...

    @property
    def window_seconds(self) -> float:
        """How far back a reading reaches (0: the rate at an instant)."""
        ...


@dataclass(frozen=True)
class StepTime:
    """A goodput job's mean step time at one configuration it has run."""

    replicas: int  # data-parallel replicas: worker pods, one rank each
    local_batch: int
    accum_steps: int
    seconds: float


@dataclass(frozen=True)
class GradientReport:
    """What a job that measures its gradient statistics reports (the training helper's gauges):
    its noise scale at its base batch, its batch bounds, the batch in use and its step times."""

    noise_scale: float
    base_batch: int
    max_local_batch: int
    max_global_batch: int
    local_batch: int | None = None
    accum_steps: int | None = None
    replicas: int | None = None
    steps: tuple[StepTime, ...] = ()


class GoodputSource(Protocol):
    """The gradient statistics of the jobs that report them."""

    def goodput(
        self, jobs: Sequence[ManagedJob], *, now: datetime
    ) -> Mapping[JobKey, GradientReport]:
        """Each listed job that reports its statistics; the others are left out."""
        ...
