"""A round's observation: the jobs the engine sizes, their throughput readings, each job's state
folded with them, and the holds that keep a job's count this round.

Across rounds it remembers which annotations it warned of (a Warning once per change) and which
throughput queries failed (`inputs.query_failures`); the engine forgets a job here once it is
gone.
"""

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from autoscaler.engine.announcements import Announcement, invalid_annotations, problems
from autoscaler.engine.config import EngineConfig
from autoscaler.engine.goodput import efficiency_at
from autoscaler.engine.inputs import (
    query_failures,
    read_progress,
    read_throughput,
    sized,
    with_declared_total,
)
from autoscaler.engine.persistence import StateStore
from autoscaler.engine.ports import Cluster, JobKey, ManagedJob, Progress, ThroughputSource
from autoscaler.engine.queueing import waiting_hold
from autoscaler.engine.recovery import running_count
from autoscaler.engine.report import count_others
from autoscaler.engine.settle import hold, observe
from autoscaler.engine.state import JobState, Step
from autoscaler.engine.throughput_query import refused_holds, refused_queries
from autoscaler.engine.waiting import waiting
from autoscaler.observability.engine_metrics import EngineMetrics
from autoscaler.policies.contract import Goodput

Announce = Callable[[ManagedJob, Announcement | None], None]


class Observation:
    """`states`: the engine's state of each job, restored from `store` when first seen and
    updated in place; `announce` sends a Warning about a job's annotations."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        throughput: ThroughputSource,
        config: EngineConfig,
        store: StateStore,
        states: dict[JobKey, JobState],
        metrics: EngineMetrics | None,
        announce: Announce,
    ) -> None:
        self.cluster, self.throughput, self.config = cluster, throughput, config
        self.store, self.states, self.metrics, self.announce = store, states, metrics, announce
        self._problems: dict[JobKey, tuple[str, ...]] = {}
        self._failures: dict[JobKey, str] = {}  # this round's failed throughput queries

    def round(
        self, *, now: datetime, priced: Mapping[JobKey, Goodput]
    ) -> tuple[list[ManagedJob], dict[JobKey, float | None], dict[JobKey, Step | None]]:
        """The jobs the engine sizes, their readings, and the holds that keep their counts;
        `priced`: the goodput jobs' pricing of the last round, the batches they ran at since."""
        elastic = self.cluster.jobs()
        if self.metrics:
            count_others(self.metrics, elastic)
        jobs = [job for job in elastic if sized(job)]
        source = self.config.prometheus
        refused = refused_queries(
            jobs, window=source.window, allowed_namespaces=source.job_query_namespaces
        )
        self._warn_invalid(jobs, refused=refused)
        readings = self._read(jobs, now=now, refused=refused)
        progress = read_progress(self.throughput, jobs, now=now)
        jobs = [with_declared_total(job, progress.get(job.key)) for job in jobs]
        holds = self._observe(jobs, readings=readings, progress=progress, priced=priced, now=now)
        holds.update(refused_holds(jobs, refused))
        return jobs, readings, holds

    def forget(self, key: JobKey) -> None:
        """A job that is gone: its warnings may be sent again should it come back."""
        self._problems.pop(key, None)

    def _warn_invalid(self, jobs: Sequence[ManagedJob], *, refused: Mapping[JobKey, str]) -> None:
        """A Warning for each job whose annotations are ignored or refused, once per change."""
        for job in jobs:
            found = problems(job, refused=refused)
            self.announce(job, invalid_annotations(found, announced=self._problems.get(job.key)))
            self._problems[job.key] = found

    def _read(
        self, jobs: Sequence[ManagedJob], *, now: datetime, refused: Mapping[JobKey, str]
    ) -> dict[JobKey, float | None]:
        readings = read_throughput(self.throughput, jobs, now=now, refused=refused)
        self._failures = query_failures(self.throughput, jobs, previous=self._failures)
        if self.metrics:
            for key, value in readings.items():
                if value is None:
                    cause = "query_failed" if key in self._failures else "no_data"
                    self.metrics.metrics_unavailable.labels(cause).inc()
        return readings

    def _observe(
        self,
        jobs: Sequence[ManagedJob],
        *,
        readings: Mapping[JobKey, float | None],
        progress: Mapping[JobKey, Progress],
        priced: Mapping[JobKey, Goodput],
        now: datetime,
    ) -> dict[JobKey, Step | None]:
        """Fold this round's readings into each job's state; which jobs must keep their count."""
        config = self.config.settle
        window = self.throughput.window_seconds  # once a round: 5,000 jobs are observed in it
        holds = {}
        for job in jobs:
            state = self.states.get(job.key)
            if state is None:
                state = self.store.restore(job)
            done = progress.get(job.key, Progress()).samples_done
            efficiency = efficiency_at(priced.get(job.key), running_count(job) or job.replicas)
            state = observe(
                job,
                state,
                reading=readings[job.key],
                samples_done=done,
                efficiency=efficiency,
                now=now,
                config=config,
                window_seconds=window,
            )
            self.states[job.key] = state
            if job.held_back:  # no pods, so no reading: only its cooldown holds it
                holds[job.key] = waiting_hold(job, state, now=now, config=config)
                continue
            if waiting(job, state):  # not started: no reading to wait for, no world to restart
                holds[job.key] = None
                continue
            holds[job.key] = hold(
                job,
                state,
                reading=readings[job.key],
                now=now,
                config=config,
                failure=self._failures.get(job.key, ""),
            )
        return holds
