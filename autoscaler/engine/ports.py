"""The engine's view of the outside world: small interfaces with a real and a simulated side.

`autoscaler.clients` implements them against Kubernetes and Prometheus, `autoscaler.sim` against
the simulated cluster; the engine cannot tell the two apart.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

JobKey = tuple[str, str]  # (namespace, name)


class Owner(StrEnum):
    """Who writes a job's worker count: exactly one writer per job."""

    ENGINE = "engine"
    HPA = "hpa"  # elasticPolicy.metrics is set: the job's HorizontalPodAutoscaler owns /scale
    OPTED_OUT = "opted-out"  # the opt-out annotation is set: nobody but the user writes it


@dataclass(frozen=True)
class ManagedJob:
    """An elastic job as read from the cluster, before any decision."""

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
    finished: bool = False
    state: str = ""  # the engine's persisted state (annotation JSON), "" when none
    uid: str = ""

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)


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

    def save_state(self, job: ManagedJob, *, state: str) -> None:
        """Persist the engine's state of a job (an annotation), so a new leader resumes it."""
        ...

    def event(
        self, job: ManagedJob, *, reason: str, message: str, warning: bool = False
    ) -> None: ...


class ThroughputSource(Protocol):
    """Training throughput (samples/s) of each job over the recent window, None when unknown."""

    def read(
        self, jobs: Sequence[ManagedJob], *, now: datetime
    ) -> Mapping[JobKey, float | None]: ...
