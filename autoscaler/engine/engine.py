"""One decision round: observe -> decide -> settle -> act -> record.

Pure steps live in `settle` and `snapshot`; this module sequences them and does the I/O through
the ports. The policy is called through a `PolicyRunner` (in a thread, or in a worker process):
a policy that raises, overruns its time or memory budget or returns nonsense never changes a
count: that round keeps every job where it is, with an Event and a metric.
"""

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from autoscaler.engine.config import EngineConfig
from autoscaler.engine.policy_runner import PolicyRunner, ThreadRunner
from autoscaler.engine.ports import (
    Cluster,
    JobKey,
    ManagedJob,
    Owner,
    Progress,
    ThroughputSource,
)
from autoscaler.engine.report import Outcome, RoundReport, count_others, export, log_records
from autoscaler.engine.settle import (
    Settled,
    fit_capacity,
    hold,
    observe,
    remember,
    rescaled,
    settle,
    usable_reading,
)
from autoscaler.engine.snapshot import pinned, snapshot
from autoscaler.engine.state import DecisionRecord, JobState, Step
from autoscaler.observability.decision_log import DecisionLog
from autoscaler.observability.engine_metrics import EngineMetrics
from autoscaler.policies.contract import Policy, Snapshot
from autoscaler.policies.objective import Objective
from autoscaler.policies.speedup import JobCurve, curves, objective_value
from autoscaler.policies.throughput_model import ThroughputModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proposals:
    steps: dict[JobKey, Step]
    seconds: float
    fallback: str = ""


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
    ) -> None:
        """`runner` calls the policy (default: a `ThreadRunner` on `policy`); `policy` stays
        the one whose `reporting` scores the rounds."""
        self.cluster, self.throughput, self.policy = cluster, throughput, policy
        self.policy_name, self.config = policy_name, config
        self.objective = objective or Objective()
        self.model = model or ThroughputModel()
        self.metrics, self.decision_log = metrics, decision_log
        self.states: dict[JobKey, JobState] = {}
        self._saved: dict[JobKey, tuple[str, datetime]] = {}
        self._stored_replicas: dict[JobKey, int | None] = {}  # the count the stored state holds
        self.runner = runner or ThreadRunner(
            policy, name=policy_name, timeout=config.policy.timeout_seconds
        )
        self._problems: dict[JobKey, tuple[str, ...]] = {}
        self._failures: dict[JobKey, str] = {}  # this round's failed throughput queries

    def close(self) -> None:
        self.runner.close()

    def run_once(self, *, now: datetime) -> RoundReport:
        elastic = self.cluster.jobs()
        if self.metrics:
            count_others(self.metrics, elastic)
        jobs = [job for job in elastic if job.owner is Owner.ENGINE and not job.finished]
        self._warn_invalid(jobs)
        readings = self._read(jobs, now=now)
        progress = self._progress(jobs, now=now)
        jobs = [_with_declared_total(job, progress.get(job.key)) for job in jobs]
        holds = self._observe(jobs, readings=readings, progress=progress, now=now)
        capacity = dict(
            self.config.capacity if self.config.capacity is not None else self.cluster.capacity()
        )
        restart = self.config.restart_seconds
        view = snapshot(jobs, self.states, capacity=capacity, now=now, restart_seconds=restart)
        proposals = self._decide(pinned(view, holds), jobs=jobs, now=now)
        settled = self._settle(jobs, proposals=proposals, holds=holds, capacity=capacity, now=now)
        fitted = curves(view, model=self.model)  # once: for the objective and the predictions
        counts = {key: one.replicas for key, one in settled.items()}
        objective = objective_value(
            view, counts, objective=self.objective, model=self.model, fitted=fitted
        )
        outcomes = tuple(
            self._act(
                job,
                settled[job.key],
                proposals.steps[job.key],
                reading=readings[job.key],
                curve=fitted[job.key],
                objective=objective,
                now=now,
            )
            for job in jobs
        )
        report = RoundReport(
            time=now,
            policy=self.policy_name,
            snapshot=view,
            solve_seconds=proposals.seconds,
            objective=objective,
            fallback=proposals.fallback,
            outcomes=outcomes,
        )
        self._record(report, capacity=capacity)
        self._forget_gone({job.key for job in jobs})
        return report

    def _warn_invalid(self, jobs: Sequence[ManagedJob]) -> None:
        """A Warning for each job whose annotations are ignored, once per change of them."""
        for job in jobs:
            if job.problems and self._problems.get(job.key) != job.problems:
                message = "; ".join(job.problems)
                self.cluster.event(job, reason="InvalidAnnotation", message=message, warning=True)
            self._problems[job.key] = job.problems

    def _observe(
        self,
        jobs: Sequence[ManagedJob],
        *,
        readings: Mapping[JobKey, float | None],
        progress: Mapping[JobKey, Progress],
        now: datetime,
    ) -> dict[JobKey, Step | None]:
        """Fold this round's readings into each job's state; which jobs must keep their count."""
        config = self.config.settle
        holds = {}
        for job in jobs:
            state = self.states.get(job.key)
            if state is None:
                state = JobState.from_json(job.state)
                self._stored_replicas[job.key] = state.replicas
            done = progress.get(job.key, Progress()).samples_done
            state = observe(
                job, state, reading=readings[job.key], samples_done=done, now=now, config=config
            )
            self.states[job.key] = state
            holds[job.key] = hold(
                job,
                state,
                reading=readings[job.key],
                now=now,
                config=config,
                failure=self._failures.get(job.key, ""),
            )
        return holds

    def _settle(
        self,
        jobs: Sequence[ManagedJob],
        *,
        proposals: "Proposals",
        holds: Mapping[JobKey, Step | None],
        capacity: Mapping[str, float],
        now: datetime,
    ) -> dict[JobKey, Settled]:
        settled = {
            job.key: settle(
                job,
                self.states[job.key],
                proposal=proposals.steps[job.key],
                held=holds[job.key],
                now=now,
                config=self.config.settle,
            )
            for job in jobs
        }
        return fit_capacity(jobs, settled, capacity=capacity)

    def _read(self, jobs: Sequence[ManagedJob], *, now: datetime) -> dict[JobKey, float | None]:
        try:
            raw: Mapping[JobKey, float | None] = self.throughput.read(jobs, now=now)
        except Exception:  # a broken source is an outage: hold everything, never crash
            log.exception("reading throughput failed; holding every job")
            raw = {}
        readings = {job.key: usable_reading(raw.get(job.key)) for job in jobs}
        self._failures = self._query_failures(jobs)
        if self.metrics:
            for key, value in readings.items():
                if value is None:
                    cause = "query_failed" if key in self._failures else "no_data"
                    self.metrics.metrics_unavailable.labels(cause).inc()
        return readings

    def _query_failures(self, jobs: Sequence[ManagedJob]) -> dict[JobKey, str]:
        """Why each job's throughput query failed this round; a changed cause is logged once."""
        try:
            failures = dict(self.throughput.last_errors)
        except Exception:  # the source's own bookkeeping failed: report no causes
            log.exception("reading the throughput source's errors failed")
            failures = {}
        for job in jobs:
            failure = failures.get(job.key, "")
            if failure and failure != self._failures.get(job.key, ""):
                log.warning("throughput of %s/%s unknown: %s", job.namespace, job.name, failure)
        return failures

    def _progress(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, Progress]:
        try:
            return self.throughput.progress(jobs, now=now)
        except Exception:  # progress only sharpens estimates: without it the engine integrates
            log.exception("reading progress failed; estimating it from throughput")
            return {}

    def _decide(self, view: Snapshot, *, jobs: Sequence[ManagedJob], now: datetime) -> Proposals:
        started = time.perf_counter()
        result = self.runner.decide(view, now=now)
        seconds = time.perf_counter() - started
        fallback = result.fallback
        by_key = {decision.key: decision for decision in result.decisions}
        steps = {}
        for job in jobs:
            decision = by_key.get(job.key)
            if fallback or decision is None:
                reason = fallback or "NotDecided"
                why = fallback or "the policy returned no count for the job"
                message = f"kept at {job.replicas}: {why}"
                steps[job.key] = Step(
                    name="policy", replicas=job.replicas, reason=reason, message=message
                )
            else:
                steps[job.key] = Step(
                    name="policy",
                    replicas=decision.replicas,
                    reason=decision.reason,
                    message=decision.message,
                )
        return Proposals(steps=steps, seconds=seconds, fallback=fallback)

    def _act(
        self,
        job: ManagedJob,
        settled: Settled,
        proposal: Step,
        *,
        reading: float | None,
        curve: JobCurve,
        objective: float,
        now: datetime,
    ) -> Outcome:
        # Held rounds count too: their count keeps a fresh rescale from being undone before the
        # window passes (without it bench-sim measured 1.5 % slower jobs and 6 % more rescales).
        state = remember(
            self.states[job.key],
            recommendation=proposal.replicas,
            now=now,
            config=self.config.settle,
        )
        written, error = False, ""
        if settled.replicas != job.replicas and not self._write_ahead(job, state):
            error = "the state could not be stored before the write"
        elif settled.replicas != job.replicas:
            result = self.cluster.scale(job, replicas=settled.replicas)
            written, error = result.written, result.error
            if written:
                state = rescaled(state, to=settled.replicas, now=now)
            self._count_write("written" if written else "error" if error else "unchanged")
        record = DecisionRecord(
            time=now,
            policy=self.policy_name,
            proposed=proposal.replicas,
            replicas=settled.replicas,
            reason=settled.reason,
            message=settled.steps[-1].message,
            steps=list(settled.steps),
            written=written,
            objective=objective,
        )
        self._announce(job, record, previous=state.last_decision, error=error)
        self.states[job.key] = state.with_decision(record)
        self._save(job, now=now)
        predicted = curve.at(settled.replicas) if curve.known else None
        return Outcome(
            job=job,
            settled=settled,
            written=written,
            error=error,
            observed=reading,
            predicted=predicted,
        )

    def _announce(
        self,
        job: ManagedJob,
        record: DecisionRecord,
        *,
        previous: DecisionRecord | None,
        error: str,
    ) -> None:
        """An Event on a write, a failed write, or a reason other than last round's."""
        if error:
            self.cluster.event(
                job,
                reason="ScaleFailed",
                message=f"writing {record.replicas} workers failed: {error}",
                warning=True,
            )
            return
        changed = previous is None or (previous.reason, previous.replicas) != (
            record.reason,
            record.replicas,
        )
        if record.written:
            message = (
                f"{job.replicas} -> {record.replicas} workers ({record.reason}): {record.message}"
            )
            self.cluster.event(job, reason="Rescaled", message=message)
        elif changed:
            warning = record.reason.startswith("Policy") or record.reason == "MetricsUnavailable"
            self.cluster.event(job, reason=record.reason, message=record.message, warning=warning)

    def _write_ahead(self, job: ManagedJob, state: JobState) -> bool:
        """Before a write, the stored state must hold the count the write changes: then a
        leader killed between its write and its state save leaves a state whose count differs
        from the job's, which the next leader counts as a rescale (its cooldown starting then).
        Without it a job's first rescale was never stored, and the next leader rescaled the job
        again in its first round (the fault matrix's engine case measured it)."""
        if self._stored_replicas.get(job.key) == job.replicas:
            return True
        try:
            self.cluster.save_state(job, state=state.to_json())
        except Exception:  # no write whose rescale could go uncounted
            log.exception("storing the state of %s/%s before a write failed", *job.key)
            return False
        self._stored_replicas[job.key] = state.replicas
        return True

    def _save(self, job: ManagedJob, *, now: datetime) -> None:
        """Persist the state when something that matters changed, else at most every few minutes."""
        state = self.states[job.key]
        essence = _essence(state)
        saved = self._saved.get(job.key)
        due = saved is None or (now - saved[1]).total_seconds() >= self.config.state_save_seconds
        if saved is not None and saved[0] == essence and not due:
            return
        try:
            self.cluster.save_state(job, state=state.to_json())
            self._saved[job.key] = (essence, now)
            self._stored_replicas[job.key] = state.replicas
        except Exception:  # the next round retries; the decision itself already happened
            log.exception("saving the state of %s/%s failed", job.namespace, job.name)

    def _count_write(self, result: str) -> None:
        if self.metrics:
            self.metrics.writes.labels(result).inc()

    def _record(self, report: RoundReport, *, capacity: Mapping[str, float]) -> None:
        if self.decision_log:
            self.decision_log.write(log_records(report))
        if self.metrics:
            export(self.metrics, report, capacity=capacity)

    def _forget_gone(self, keys: set[JobKey]) -> None:
        for key in set(self.states) - keys:
            self.states.pop(key)
            self._saved.pop(key, None)
            self._stored_replicas.pop(key, None)
            self._problems.pop(key, None)
            if self.metrics:
                self.metrics.forget(namespace=key[0], name=key[1])


def _with_declared_total(job: ManagedJob, progress: Progress | None) -> ManagedJob:
    """The job's total work: its annotation, else what its training helper reports."""
    reported = progress.total_samples if progress is not None else None
    if job.total_samples is not None or reported is None or not reported > 0:
        return job
    return dataclasses.replace(job, total_samples=reported)


def _essence(state: JobState) -> str:
    decision = state.last_decision
    return repr(
        (
            state.replicas,
            state.last_rescale,
            state.rescales,
            state.restarts_spent,
            sorted(state.throughput),
            decision and (decision.reason, decision.replicas),
        )
    )
