"""One decision round: observe -> decide -> settle -> act -> record.

This module sequences the round; the decisions are pure and live beside it (`pipeline`, which
alone orders the settle steps of `queueing` and `settle`; `proposals`, `conclusion`,
`announcements`), and its I/O goes through the ports:
what it reads in `inputs` (a round's observation in `observation`), the counts it writes in
`application`, the per-job state it keeps in `persistence`. The policy is called through a
`PolicyRunner` (in a thread, or in a worker process): a policy that raises, overruns its time or
memory budget or returns nonsense never changes a count: that round keeps every job where it is,
with an Event and a metric.
"""

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta

from autoscaler.engine.announcements import Announcement, announcement
from autoscaler.engine.application import CountWriter
from autoscaler.engine.conclusion import (
    NOT_WRITTEN,
    Acted,
    Decided,
    Written,
    conclude,
    decision_record,
)
from autoscaler.engine.config import EngineConfig
from autoscaler.engine.goodput import priced_at
from autoscaler.engine.inputs import read_goodput
from autoscaler.engine.observation import Observation
from autoscaler.engine.persistence import StateStore
from autoscaler.engine.pipeline import settle_round
from autoscaler.engine.policy_runner import PolicyRunner, ThreadRunner
from autoscaler.engine.ports import Cluster, GoodputSource, JobKey, ManagedJob, ThroughputSource
from autoscaler.engine.proposals import Proposals, proposals
from autoscaler.engine.queueing import queue_view, refused_hold
from autoscaler.engine.report import Outcome, RoundReport, export, log_records
from autoscaler.engine.settle import Settled, current
from autoscaler.engine.snapshot import engine_bounds, pinned, snapshot
from autoscaler.engine.state import JobState
from autoscaler.observability.decision_log import DecisionLog
from autoscaler.observability.engine_metrics import EngineMetrics
from autoscaler.policies.contract import Goodput, Policy, Snapshot
from autoscaler.policies.objective import Objective
from autoscaler.policies.speedup import JobCurve, curves, objective_value
from autoscaler.policies.throughput_model import ThroughputModel

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self,
        *,
        cluster: Cluster,
        throughput: ThroughputSource,
        policy: Policy,
        policy_name: str,
        config: EngineConfig,
        objective: Objective | None = None,
        model: ThroughputModel | None = None,
        metrics: EngineMetrics | None = None,
        decision_log: DecisionLog | None = None,
        runner: PolicyRunner | None = None,
        goodput: GoodputSource | None = None,
    ) -> None:
        """`runner` calls the policy (default: a `ThreadRunner` on `policy`); `policy` stays
        the one whose `reporting` scores the rounds. `goodput`: where the jobs that measure their
        gradient statistics report them (those are then sized by goodput); None = none is."""
        self.cluster, self.throughput, self.policy = cluster, throughput, policy
        self.policy_name, self.config = policy_name, config
        self.objective = objective or Objective()
        self.model = model or ThroughputModel()
        self.metrics, self.decision_log = metrics, decision_log
        self.states: dict[JobKey, JobState] = {}
        self.runner = runner or ThreadRunner(
            policy, name=policy_name, timeout=config.policy.timeout_seconds
        )
        # Each job's writes (its /scale, then its state) run on one of these threads, in order;
        # jobs are written side by side because a round's writes wait on the API server, and
        # one after another they dominate a large round (measured by `make bench-scale`).
        self._writers = ThreadPoolExecutor(
            max_workers=config.write_concurrency, thread_name_prefix="writes"
        )
        self.store = StateStore(
            cluster,
            writers=self._writers,
            refresh_after=timedelta(seconds=config.state_save_seconds),
            refreshes_per_round=config.state_refreshes_per_round,
        )
        self.writer = CountWriter(cluster, store=self.store, config=config.settle, metrics=metrics)
        self.observation = Observation(
            cluster=cluster,
            throughput=throughput,
            config=config,
            store=self.store,
            states=self.states,
            metrics=metrics,
            announce=self._announce,
        )
        self.goodput_source = goodput
        self._priced: dict[JobKey, Goodput] = {}  # each goodput job's latest pricing
        self._bounds = engine_bounds(config.settle, interval_seconds=config.interval_seconds)

    def close(self) -> None:
        self.runner.close()
        self._writers.shutdown(wait=True)

    def finish_saves(self) -> None:
        """Wait for the last round's state saves (`StateStore.finish_saves`)."""
        self.store.finish_saves()

    def run_once(self, *, now: datetime) -> RoundReport:
        self.finish_saves()
        jobs, readings, holds = self.observation.round(now=now, priced=self._priced)
        capacity = dict(
            self.config.capacity if self.config.capacity is not None else self.cluster.capacity()
        )
        self._priced = read_goodput(self.goodput_source, jobs, now=now, last=self._priced)
        view = snapshot(
            jobs,
            self.states,
            capacity=capacity,
            now=now,
            restart_seconds=self.config.restart_seconds,
            goodput=self._priced,
            bounds=self._bounds,
            prior=self.config.waiting_prior,
            trust_declared=self.config.trust_declared_profiles,
        )
        # Fitted once, for the objective and the predictions, on a writer thread while the
        # policy decides: the writers are idle until the round's first write, and the main
        # thread only waits for the policy's worker (`make bench-scale` times the round).
        fitting = self._writers.submit(curves, view, model=self.model)
        shown = queue_view(
            pinned(view, holds),
            {job.key: job for job in jobs},
            self.states,
            holds,
            now=now,
            config=self.config.settle,
        )
        proposed = self._decide(shown, jobs=jobs, now=now)
        settled = settle_round(
            jobs,
            self.states,
            proposals=proposed.steps,
            holds=holds,
            capacity=capacity,
            now=now,
            config=self.config.settle,
        )
        self._log_refused_holds(jobs, settled)
        fitted = fitting.result()
        scoring = self._score(view, settled, fitted=fitted)
        decided = {
            job.key: self._decided(job, settled[job.key], proposed, readings, fitted)
            for job in jobs
        }
        outcomes = self._act_all(jobs, decided, objective=scoring, now=now)
        report = RoundReport(
            time=now,
            policy=self.policy_name,
            snapshot=view,
            solve_seconds=proposed.seconds,
            objective=scoring.result(),
            fallback=proposed.fallback,
            outcomes=outcomes,
        )
        self._record(report, capacity=capacity)
        self._forget_gone({job.key for job in jobs})
        return report

    def _decide(self, view: Snapshot, *, jobs: Sequence[ManagedJob], now: datetime) -> Proposals:
        started = time.perf_counter()
        result = self.runner.decide(view, now=now)
        seconds = time.perf_counter() - started
        if result.replaced and self.metrics:
            self.metrics.worker_replacements.labels(result.replaced).inc()
        return proposals(result, jobs, seconds=seconds)

    def _log_refused_holds(
        self, jobs: Sequence[ManagedJob], settled: Mapping[JobKey, Settled]
    ) -> None:
        """Log a policy's 0 that became a job's minimum, when it is news."""
        for job in jobs:
            step = refused_hold(settled[job.key], self.states[job.key])
            if step is not None:
                log.warning("%s/%s: %s", job.namespace, job.name, step.message)

    def _score(
        self,
        view: Snapshot,
        settled: Mapping[JobKey, Settled],
        *,
        fitted: Mapping[JobKey, JobCurve],
    ) -> Future[float]:
        """The objective of the settled counts, scored on a writer thread while the first writes
        go out; a rescale's record waits for it after its write."""
        counts = {key: one.replicas for key, one in settled.items() if one.replicas > 0}
        running = view.model_copy(update={"jobs": [j for j in view.jobs if j.key in counts]})
        return self._writers.submit(
            objective_value,
            running,
            counts,
            objective=self.objective,
            model=self.model,
            fitted=fitted,
        )

    def _decided(
        self,
        job: ManagedJob,
        settled: Settled,
        proposed: Proposals,
        readings: Mapping[JobKey, float | None],
        fitted: Mapping[JobKey, JobCurve],
    ) -> Decided:
        """What the round knows of the job before its write."""
        return Decided(
            job=job,
            state=self.states[job.key],
            settled=settled,
            proposal=proposed.steps[job.key],
            reading=readings[job.key],
            curve=fitted[job.key],
            priced=priced_at(self._priced.get(job.key), settled.replicas),
        )

    def _act_all(
        self,
        jobs: Sequence[ManagedJob],
        decided: Mapping[JobKey, Decided],
        *,
        objective: Future[float],
        now: datetime,
    ) -> tuple[Outcome, ...]:
        """Every job's outcome, in `jobs`' order. A rescale's /scale write goes out on a writer
        thread and the round waits for it; the rest is decided here, with no I/O. The states to
        save (a rescaled job's, one changed in substance, a few due for a refresh) go to the
        writers after the counts, and the round does not wait for them (`finish_saves`)."""
        # The rescales go to the writers first, so their requests overlap the rest of the loop
        # (in a large round the loop takes longer than the round's rescales' writes).
        moving = [job for job in jobs if decided[job.key].settled.replicas != current(job)]
        rescales = {
            job.key: self._writers.submit(self._rescale, decided[job.key], objective, now)
            for job in moving
        }
        acted: dict[JobKey, Acted] = {}
        to_save: list[tuple[ManagedJob, JobState]] = []
        unchanged: list[tuple[ManagedJob, JobState]] = []
        value = objective.result()
        for job in jobs:
            if job.key in rescales:
                continue
            acted[job.key] = done = self._conclude(decided[job.key], NOT_WRITTEN, value, now)
            changed = self.store.changed(job.key, done.state)
            (to_save if changed else unchanged).append((job, done.state))
        for job in moving:
            acted[job.key] = done = rescales[job.key].result()
            if self.store.changed(job.key, done.state):
                to_save.append((job, done.state))
        for job, state in [*to_save, *self.store.refreshes(unchanged, now=now)]:
            self.store.save_later(job, state, now=now)
        for job in jobs:
            self.states[job.key] = acted[job.key].state
        return tuple(acted[job.key].outcome for job in jobs)

    def _rescale(self, decided: Decided, objective: Future[float], now: datetime) -> Acted:
        """On a writer thread: the write (`CountWriter.write`), then the job's state after it
        (saved later, with the round's other states)."""
        written = self.writer.write(decided, now=now)
        return self._conclude(decided, written, objective.result(), now)

    def _conclude(self, decided: Decided, write: Written, objective: float, now: datetime) -> Acted:
        """The job's round concluded (no I/O but its Event, if it has news)."""
        record = decision_record(
            decided, write, policy=self.policy_name, objective=objective, now=now
        )
        news = announcement(
            decided.job,
            record,
            decided.settled,
            previous=decided.state.last_decision,
            error=write.error,
        )
        self._announce(decided.job, news)
        return conclude(decided, write, record, now=now, config=self.config.settle)

    def _announce(self, job: ManagedJob, news: Announcement | None) -> None:
        """Send the Event `news` names, if any, and count the queueing it reports."""
        if news is None:
            return
        self.cluster.event(job, reason=news.reason, message=news.message, warning=news.warning)
        if news.queueing is not None and self.metrics:
            self.metrics.queueing.labels(*news.queueing).inc()

    def _record(self, report: RoundReport, *, capacity: Mapping[str, float]) -> None:
        if self.decision_log:
            self.decision_log.write(log_records(report))
        if self.metrics:
            export(self.metrics, report, capacity=capacity)

    def _forget_gone(self, keys: set[JobKey]) -> None:
        for key in set(self.states) - keys:
            self.states.pop(key)
            self.store.forget(key)
            self.observation.forget(key)
            if self.metrics:
                self.metrics.forget(namespace=key[0], name=key[1])
