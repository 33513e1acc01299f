"""`Cluster` and `ThroughputSource` over the simulation's state: the engine cannot tell them apart
from Kubernetes and Prometheus.

- `jobs()` lists every submitted job that was not rejected, finished ones with `finished=True`;
  `replicas` is the spec, `active` the bound (running) workers, 0 while queued; with
  `declared_work` each job declares its total samples (iterations x global batch), as the
  `total-samples` annotation or the training helper would.
- `capacity()` is `{"nvidia.com/gpu": total GPUs}`: every job here is the engine's.
- `preemptible`: every job lets the engine hold it back (else only those the workload marks);
  `suspend()` and `resume()` hold a job back and queue it again (`SimState.suspend`, `resume`),
  under the same conflict check as `scale()`.
- `scale()` writes the spec if `job.replicas` is still current (else a conflict, as a
  resourceVersion mismatch would be) and the count is within the job's bounds.
- `SimThroughput.read` reports samples/s (iterations/s x global batch) of a job that is training
  right now, None while it is queued, restarting or finished: the rate is constant between
  restarts, so a window average over the time since the last restart is that rate. Optional noise
  (relative, Gaussian) is seeded by (seed, job, virtual time): the same run gives the same numbers.
  `progress` reports the samples each running job has trained, exactly (no noise), as the
  training helper's progress gauge would.
"""

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.api import coordinates as c
from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import JobKey, ManagedJob, Progress, ScaleResult
from autoscaler.sim.state import Phase, SimJob, SimState

GPU = c.GPU_RESOURCE


@dataclass(frozen=True)
class SimEvent:
    """An Event as Kubernetes would record it, at virtual time `seconds` since the start."""

    seconds: float
    namespace: str
    name: str
    reason: str
    message: str
    warning: bool = False
    source: str = "engine"  # "engine" (written through Cluster.event) or "simulator"


def declared_profile(job: SimJob) -> dict[int, float]:
    """The samples/s a job's own profiling run would declare: its rates now, at every count it
    may run at (with goodput, in samples at its base batch)."""
    spec = job.spec
    counts = range(spec.min_replicas, spec.max_replicas + 1)
    return {n: job.rates[n] * spec.batch_size for n in counts if job.rates[n] > 0}


class SimCluster:
    """The simulated cluster as the engine sees it (implements `ports.Cluster`)."""

    def __init__(
        self,
        state: SimState,
        *,
        namespace: str,
        origin: datetime,
        declared_work: bool = True,
        preemptible: bool = False,
        declared_profiles: bool = False,
    ) -> None:
        self._state = state
        self.namespace = namespace
        self.declared_work = declared_work
        self.preemptible = preemptible
        self.declared_profiles = declared_profiles
        self.origin = origin
        self.events: list[SimEvent] = []
        self.writes = 0  # successful /scale writes

    def at(self, seconds: float) -> datetime:
        return self.origin + timedelta(seconds=seconds)

    def jobs(self) -> Sequence[ManagedJob]:
        visible = (Phase.QUEUED, Phase.RUNNING, Phase.SUSPENDED, Phase.FINISHED)
        return [self._managed(job) for job in self._state.jobs if job.phase in visible]

    def _managed(self, job: SimJob) -> ManagedJob:
        spec = job.spec
        return ManagedJob(
            namespace=self.namespace,
            name=spec.name,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            replicas=job.replicas,
            active=job.active,
            owner=Owner.ENGINE,
            created=self.at(spec.submit_time),
            resources_per_replica={GPU: float(spec.gpus_per_replica)},
            weight=spec.weight,
            max_restarts=None,
            restart_seconds=self._state.torchft_seconds if spec.torchft else None,
            finished=job.phase is Phase.FINISHED,
            state=job.annotation,
            total_samples=float(spec.iterations * spec.batch_size) if self.declared_work else None,
            preemptible=self.preemptible or spec.preemptible,
            suspended=job.phase is Phase.SUSPENDED,
            held_since=None if job.suspended_at is None else self.at(job.suspended_at),
            throughput_profile=declared_profile(job) if self.declared_profiles else None,
        )

    def capacity(self) -> Mapping[str, float]:
        return {GPU: float(self._state.total_gpus)}

    def _find(self, job: ManagedJob) -> SimJob | None:
        if job.namespace != self.namespace:
            return None
        found = self._state.by_name.get(job.name)
        return found if found is not None and found.phase is not Phase.WAITING else None

    def scale(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        found = self._find(job)
        if found is None or found.phase is Phase.REJECTED:
            return ScaleResult(written=False, replicas=0, error=f"{job.name}: not found")
        if found.phase is Phase.FINISHED:
            return ScaleResult(written=False, replicas=found.replicas, error="the job has finished")
        if job.replicas != found.replicas:
            error = f"conflict: spec is {found.replicas}, not {job.replicas}"
            return ScaleResult(written=False, replicas=found.replicas, error=error)
        spec = found.spec
        if not spec.min_replicas <= replicas <= spec.max_replicas:
            error = f"{replicas} is outside [{spec.min_replicas}, {spec.max_replicas}]"
            return ScaleResult(written=False, replicas=found.replicas, error=error)
        if replicas == found.replicas:
            return ScaleResult(written=False, replicas=replicas)
        self._state.set_replicas(found, replicas)
        self.writes += 1
        return ScaleResult(written=True, replicas=replicas)

    def _writable(self, job: ManagedJob) -> tuple[SimJob | None, ScaleResult | None]:
        """The simulated job behind `job` if a write may change it, else why not."""
        found = self._find(job)
        if found is None or found.phase is Phase.REJECTED:
            return None, ScaleResult(written=False, replicas=0, error=f"{job.name}: not found")
        if found.phase is Phase.FINISHED:
            return None, ScaleResult(False, found.replicas, error="the job has finished")
        if job.replicas != found.replicas or job.suspended != (found.phase is Phase.SUSPENDED):
            error = f"conflict: {found.spec.name} changed since it was read"
            return None, ScaleResult(written=False, replicas=found.replicas, error=error)
        return found, None

    def suspend(self, job: ManagedJob, *, since: datetime) -> ScaleResult:
        found, refused = self._writable(job)
        if found is None:
            return refused or ScaleResult(written=False, replicas=0)
        self._state.suspend(found)
        self.writes += 1
        return ScaleResult(written=True, replicas=found.replicas)

    def resume(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        found, refused = self._writable(job)
        if found is None:
            return refused or ScaleResult(written=False, replicas=0)
        spec = found.spec
        if (
            found.phase is not Phase.SUSPENDED
            or not spec.min_replicas <= replicas <= spec.max_replicas
        ):
            error = f"cannot resume {found.spec.name} ({found.phase}) at {replicas}"
            return ScaleResult(written=False, replicas=found.replicas, error=error)
        self._state.resume(found, replicas)
        self.writes += 1
        return ScaleResult(written=True, replicas=replicas)

    def save_state(self, job: ManagedJob, *, state: str) -> None:
        found = self._find(job)
        if found is not None:
            found.annotation = state

    def event(self, job: ManagedJob, *, reason: str, message: str, warning: bool = False) -> None:
        self.record(job.name, reason=reason, message=message, warning=warning, source="engine")

    def record(
        self, name: str, *, reason: str, message: str, warning: bool = False, source: str
    ) -> None:
        event = SimEvent(self._state.now, self.namespace, name, reason, message, warning, source)
        self.events.append(event)


class SimThroughput:
    """Training throughput as Prometheus would report it (implements `ThroughputSource`)."""

    def __init__(self, state: SimState, *, namespace: str, noise: float = 0.0, seed: int = 0):
        self._state = state
        self.namespace = namespace
        self.noise = noise
        self.seed = seed

    def read(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, float | None]:
        """Samples/s of each job at the simulation's current instant (`now` is that instant)."""
        return {job.key: self._samples_per_second(job) for job in jobs}

    @property
    def last_errors(self) -> Mapping[JobKey, str]:
        return {}  # the simulated source never fails: a job without a value has no data yet

    @property
    def window_seconds(self) -> float:
        return 0.0  # a reading is the rate at the simulation's instant

    def progress(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, Progress]:
        """Samples trained so far by each job that runs, as the training helper reports them."""
        found = [self._running(job) for job in jobs]
        return {
            job.key: Progress(samples_done=state.done * state.spec.batch_size)
            for job, state in zip(jobs, found, strict=True)
            if state is not None
        }

    def _running(self, job: ManagedJob) -> SimJob | None:
        """The simulated job behind `job` while it runs, else None."""
        found = self._state.by_name.get(job.name) if job.namespace == self.namespace else None
        return found if found is not None and found.phase is Phase.RUNNING else None

    def _samples_per_second(self, job: ManagedJob) -> float | None:
        found = self._running(job)
        if found is None:
            return None
        if found.stall_until > self._state.now:
            return None
        rate = found.rate() * found.spec.batch_size
        if self.noise > 0:
            draw = random.Random(f"{self.seed}/{job.name}/{self._state.now!r}").gauss(0.0, 1.0)
            rate *= max(0.0, 1.0 + self.noise * draw)
        return rate
