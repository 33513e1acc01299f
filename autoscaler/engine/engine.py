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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from autoscaler.engine.config import EngineConfig
from autoscaler.engine.goodput import price_job
from autoscaler.engine.policy_runner import PolicyRunner, ThreadRunner
from autoscaler.engine.ports import (
    Cluster,
    GoodputSource,
    GradientReport,
    JobKey,
    ManagedJob,
    Owner,
    Progress,
    ScaleResult,
    ThroughputSource,
)
from autoscaler.engine.queueing import (
    queue,
    queue_view,
    resumed,
    suspended,
    waiting_hold,
)
from autoscaler.engine.report import Outcome, RoundReport, count_others, export, log_records
from autoscaler.engine.settle import (
    STARVATION_STEP,
    Settled,
    current,
    fit_capacity,
    hold,
    limit_rescales,
    observe,
    recommendations,
    remember,
    rescaled,
    settle,
    usable_reading,
)
from autoscaler.engine.snapshot import pinned, snapshot
from autoscaler.engine.state import DecisionRecord, JobState, PricedBatch, Step
from autoscaler.engine.throughput_query import REFUSED, refusal
from autoscaler.observability.decision_log import DecisionLog
from autoscaler.observability.engine_metrics import EngineMetrics
from autoscaler.policies.contract import Goodput, Policy, Snapshot
from autoscaler.policies.objective import Objective
from autoscaler.policies.speedup import JobCurve, curves, objective_value
from autoscaler.policies.throughput_model import ThroughputModel

log = logging.getLogger(__name__)


# Hold reasons a user already learns from another Event: a cooldown follows every rescale, which
# the `Rescaled` Event announces (upstream's HPA, too, sends an Event per rescale, none per
# cooldown round).
FOLLOWS_A_RESCALE = frozenset({"RescaleCooldown"})

Essence = tuple[object, ...]  # what of a job's state must be saved at once (`essence`)


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
        self._saved: dict[JobKey, tuple[Essence, datetime]] = {}
        self._stored_replicas: dict[JobKey, int | None] = {}  # the count the stored state holds
        self._saving: dict[JobKey, Future[Acted]] = {}  # the last round's state saves
        self.runner = runner or ThreadRunner(
            policy, name=policy_name, timeout=config.policy.timeout_seconds
        )
        # Each job's writes (its /scale, then its state) run on one of these threads, in order;
        # jobs are written side by side because a round's writes wait on the API server, and
        # one after another they dominate a large round (measured by `make bench-scale`).
        self._writers = ThreadPoolExecutor(
            max_workers=config.write_concurrency, thread_name_prefix="writes"
        )
        self._problems: dict[JobKey, tuple[str, ...]] = {}
        self._failures: dict[JobKey, str] = {}  # this round's failed throughput queries
        self.goodput_source = goodput
        self._priced: dict[JobKey, Goodput] = {}  # each goodput job's latest pricing

    def close(self) -> None:
        self.runner.close()
        self._writers.shutdown(wait=True)

    def run_once(self, *, now: datetime) -> RoundReport:
        self.finish_saves()
        elastic = self.cluster.jobs()
        if self.metrics:
            count_others(self.metrics, elastic)
        jobs = [job for job in elastic if _sized(job)]
        refused = self._refused_queries(jobs)
        self._warn_invalid(jobs, refused=refused)
        readings = self._read(jobs, now=now, refused=refused)
        progress = self._progress(jobs, now=now)
        jobs = [_with_declared_total(job, progress.get(job.key)) for job in jobs]
        holds = self._observe(jobs, readings=readings, progress=progress, now=now)
        for job in jobs:  # never sized on a query it may not run (a held-back job stays so)
            if job.key in refused and not job.held_back:
                why = f"{refused[job.key]}: keeping the count"
                holds[job.key] = Step(
                    name="hold", replicas=job.replicas, reason=REFUSED, message=why
                )
        capacity = dict(
            self.config.capacity if self.config.capacity is not None else self.cluster.capacity()
        )
        restart = self.config.restart_seconds
        self._priced = self._price(jobs, now=now)
        view = snapshot(
            jobs,
            self.states,
            capacity=capacity,
            now=now,
            restart_seconds=restart,
            goodput=self._priced,
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
        proposals = self._decide(shown, jobs=jobs, now=now)
        settled = self._settle(jobs, proposals=proposals, holds=holds, capacity=capacity, now=now)
        fitted = fitting.result()
        counts = {key: one.replicas for key, one in settled.items() if one.replicas > 0}
        running = view.model_copy(update={"jobs": [j for j in view.jobs if j.key in counts]})
        # Scored on a writer thread too, while the first writes go out; a rescale's record waits
        # for it after its write.
        scoring = self._writers.submit(
            objective_value,
            running,
            counts,
            objective=self.objective,
            model=self.model,
            fitted=fitted,
        )
        outcomes = self._act_all(
            jobs,
            settled,
            proposals,
            readings=readings,
            fitted=fitted,
            objective=scoring,
            now=now,
        )
        objective = scoring.result()
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

    def _price(self, jobs: Sequence[ManagedJob], *, now: datetime) -> dict[JobKey, Goodput]:
        """Each goodput job's pricing this round. When the statistics cannot be read at all, the
        last round's pricing stands (a job must not switch to a curve in another unit than its
        remaining work for an outage); a job that does not report them is not priced."""
        if self.goodput_source is None:
            return {}
        try:
            reports: Mapping[JobKey, GradientReport] = self.goodput_source.goodput(jobs, now=now)
        except Exception as failure:  # an outage: price as last round
            log.warning("reading gradient statistics failed; pricing as last round: %s", failure)
            return {job.key: self._priced[job.key] for job in jobs if job.key in self._priced}
        priced = {}
        for job in jobs:
            report = reports.get(job.key)
            if report is None:
                continue
            try:
                goodput = price_job(job, report)
            except Exception:  # one job's statistics must not fail the round
                log.exception("pricing %s/%s by goodput failed", job.namespace, job.name)
                goodput = self._priced.get(job.key)
            if goodput is not None:
                priced[job.key] = goodput
        return priced

    def _priced_at(self, key: JobKey, count: int) -> PricedBatch | None:
        """A goodput job's pricing at `count`; None for another job or an unpriced count."""
        goodput = self._priced.get(key)
        batch = goodput.batches.get(count) if goodput is not None else None
        if goodput is None or batch is None:
            return None
        return PricedBatch(
            noise_scale=goodput.noise_scale,
            base_batch=goodput.base_batch,
            replicas=count,
            batch=batch,
        )

    def _refused_queries(self, jobs: Sequence[ManagedJob]) -> dict[JobKey, str]:
        """Why each job's own throughput query is refused, for the jobs whose query is."""
        source = self.config.prometheus
        found = {
            job.key: refusal(
                job.throughput_query,
                namespace=job.namespace,
                name=job.name,
                window=source.window,
                allowed_namespaces=source.job_query_namespaces,
            )
            for job in jobs
            if job.throughput_query is not None
        }
        return {key: why for key, why in found.items() if why is not None}

    def _warn_invalid(self, jobs: Sequence[ManagedJob], *, refused: Mapping[JobKey, str]) -> None:
        """A Warning for each job whose annotations are ignored or refused, once per change."""
        for job in jobs:
            problems = (*job.problems, *([refused[job.key]] if job.key in refused else []))
            if problems and self._problems.get(job.key) != problems:
                message = "; ".join(problems)
                self.cluster.event(job, reason="InvalidAnnotation", message=message, warning=True)
            self._problems[job.key] = problems

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
            if job.held_back:  # no pods, so no reading: only its cooldown holds it
                holds[job.key] = waiting_hold(job, state, now=now, config=config)
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
            job.key: self._settle_one(
                job, proposal=proposals.steps[job.key], held=holds[job.key], now=now
            )
            for job in jobs
        }
        limited = limit_rescales(
            jobs, settled, self.states, limit=self.config.settle.max_rescales_per_round
        )
        return fit_capacity(jobs, limited, capacity=capacity)

    def _settle_one(
        self, job: ManagedJob, *, proposal: Step, held: Step | None, now: datetime
    ) -> Settled:
        """Queueing first (suspend, stay held back, resume), then the usual settle steps."""
        config, state = self.config.settle, self.states[job.key]
        queued = queue(job, state, proposal=proposal, held=held, now=now, config=config)
        if queued.settled is not None:
            return queued.settled
        last = state.last_decision
        if queued.prefix and (last is None or queued.proposal not in last.steps):
            log.warning("%s/%s: %s", job.namespace, job.name, queued.proposal.message)
        result = settle(job, state, proposal=queued.proposal, held=held, now=now, config=config)
        return Settled(replicas=result.replicas, steps=(*queued.prefix, *result.steps))

    def _read(
        self, jobs: Sequence[ManagedJob], *, now: datetime, refused: Mapping[JobKey, str]
    ) -> dict[JobKey, float | None]:
        try:  # a refused query is never sent
            run = [job for job in jobs if job.key not in refused]
            raw: Mapping[JobKey, float | None] = self.throughput.read(run, now=now)
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
        if result.replaced and self.metrics:
            self.metrics.worker_replacements.labels(result.replaced).inc()
        fallback = result.fallback
        by_key = {decision.key: decision for decision in result.decisions}
        steps = {}
        for job in jobs:
            decision = by_key.get(job.key)
            if fallback or decision is None:
                reason = fallback or "NotDecided"
                why = fallback or "the policy returned no count for the job"
                message = f"kept at {current(job)}: {why}"
                steps[job.key] = Step(
                    name="policy", replicas=current(job), reason=reason, message=message
                )
            else:
                steps[job.key] = Step(
                    name="policy",
                    replicas=decision.replicas,
                    reason=decision.reason,
                    message=decision.message,
                )
        return Proposals(steps=steps, seconds=seconds, fallback=fallback)

    def _act_all(
        self,
        jobs: Sequence[ManagedJob],
        settled: Mapping[JobKey, Settled],
        proposals: Proposals,
        *,
        readings: Mapping[JobKey, float | None],
        fitted: Mapping[JobKey, JobCurve],
        objective: Future[float],
        now: datetime,
    ) -> tuple[Outcome, ...]:
        """Every job's outcome, in `jobs`' order. A rescale's /scale write goes out on a writer
        thread and the round waits for it; the rest is decided here, with no I/O. The states to
        save (a rescaled job's, one changed in substance, a few due for a refresh) go to the
        writers after the counts, and the round does not wait for them (`finish_saves`)."""
        # The rescales go to the writers first, so their requests overlap the rest of the loop
        # (at 5,000 jobs the loop takes longer than a round's 50 rescales' writes).
        moving = [job for job in jobs if settled[job.key].replicas != current(job)]
        rescales = {
            job.key: self._writers.submit(
                partial(
                    self._rescale,
                    job,
                    settled[job.key],
                    proposals.steps[job.key],
                    reading=readings[job.key],
                    curve=fitted[job.key],
                    objective=objective,
                    now=now,
                )
            )
            for job in moving
        }
        acted: dict[JobKey, Acted] = {}
        to_save: list[tuple[ManagedJob, Acted]] = []
        unchanged: list[tuple[ManagedJob, Acted]] = []
        value = objective.result()
        for job in jobs:
            if job.key in rescales:
                continue
            done = self._act(job, settled[job.key], proposals.steps[job.key],
                             reading=readings[job.key], curve=fitted[job.key],
                             objective=value, now=now, written=False, error="")  # fmt: skip
            acted[job.key] = done
            changed = self._changed(job.key, done.state)
            (to_save if changed else unchanged).append((job, done))
        for job in moving:
            acted[job.key] = done = rescales[job.key].result()
            if self._changed(job.key, done.state):
                to_save.append((job, done))
        for job, done in [*to_save, *self._refreshes(unchanged, now=now)]:
            self._saving[job.key] = self._writers.submit(self._save, job, done, now)
        for job in jobs:
            self.states[job.key] = acted[job.key].state
        return tuple(acted[job.key].outcome for job in jobs)

    def _rescale(
        self,
        job: ManagedJob,
        settled: Settled,
        proposal: Step,
        *,
        reading: float | None,
        curve: JobCurve,
        objective: Future[float],
        now: datetime,
    ) -> "Acted":
        """On a writer thread: the state stored ahead if needed, then the /scale write; the
        job's state after it (saved later, with the round's other states)."""
        written, error = False, ""
        # A suspension changes no count (its marker dates it): nothing to store ahead of it.
        ahead = job if settled.replicas == 0 else self._write_ahead(job, proposal, now=now)
        if ahead is None:
            error = "the state could not be stored before the write"
        else:
            try:
                result = self._write(ahead, replicas=settled.replicas, now=now)
                written, error = result.written, result.error
            except Exception as failure:  # one job's broken write must not fail the round
                log.exception("writing the count of %s/%s failed", job.namespace, job.name)
                written, error = False, str(failure) or type(failure).__name__
            self._count_write("written" if written else "error" if error else "unchanged")
        return self._act(job, settled, proposal, reading=reading, curve=curve,
                         objective=objective.result(), now=now, written=written,
                         error=error)  # fmt: skip

    def _write(self, job: ManagedJob, *, replicas: int, now: datetime) -> ScaleResult:
        """The one write of the job's count: a suspension, a resume, or /scale."""
        if replicas == 0:
            return self.cluster.suspend(job, since=now)
        if job.held_back:
            return self.cluster.resume(job, replicas=replicas)
        return self.cluster.scale(job, replicas=replicas)

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
        written: bool,
        error: str,
    ) -> "Acted":
        """The job's state and outcome after this round's write (if any): no I/O but Events."""
        state = self.states[job.key]
        previous = state.last_decision
        if written and settled.replicas == 0:
            state = suspended(state, now=now)
        elif written and job.held_back:
            forced = settled.steps[-1].name == STARVATION_STEP
            state = resumed(state, to=settled.replicas, now=now, forced=forced)
        elif written:
            state = rescaled(state, to=settled.replicas, now=now)
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
        self._announce(job, record, settled, previous=previous, error=error)
        # A held-back job trains at nothing: no prediction (not the NaN of a count off its curve).
        predicted = curve.at(settled.replicas) if curve.known and settled.replicas else None
        priced = self._priced_at(job.key, settled.replicas)
        if priced is not None:  # its curve is goodput: predict the samples/s that are read
            predicted = priced.batch.samples_per_second
            state = state.model_copy(update={"goodput": priced})
        outcome = Outcome(
            job=job,
            settled=settled,
            written=written,
            error=error,
            observed=reading,
            predicted=predicted,
            goodput=priced,
        )
        # Held rounds' recommendations count too: they keep a fresh rescale from being undone
        # before the window passes (without them bench-sim measured 1.5 % slower jobs and 6 %
        # more rescales).
        kept = recommendations(
            state, recommendation=proposal.replicas, now=now, config=self.config.settle
        )
        return Acted(outcome=outcome, state=state.with_decision(record, recommendations=kept))

    def _announce(
        self,
        job: ManagedJob,
        record: DecisionRecord,
        settled: Settled,
        *,
        previous: DecisionRecord | None,
        error: str,
    ) -> None:
        """An Event on a write, on a failed write, and when a job becomes held for a reason it
        was not held for last round (never one per job per round: 5,000 jobs made 5,000 Events
        a round when every reason change was announced)."""
        if error:
            self.cluster.event(
                job,
                reason="ScaleFailed",
                message=f"writing {record.replicas} workers failed: {error}",
                warning=True,
            )
            return
        if record.written and (record.replicas == 0 or job.held_back):
            self._announce_queueing(job, record, settled)
            return
        if record.written:
            message = (
                f"{job.replicas} -> {record.replicas} workers ({record.reason}): {record.message}"
            )
            self.cluster.event(job, reason="Rescaled", message=message)
            return
        held = _held_reason(settled.steps)
        if not held or held in FOLLOWS_A_RESCALE:
            return
        if previous is not None and previous.reason == record.reason:
            return
        warning = held.startswith("Policy") or held == "MetricsUnavailable"
        self.cluster.event(job, reason=held, message=record.message, warning=warning)

    def _announce_queueing(self, job: ManagedJob, record: DecisionRecord, settled: Settled) -> None:
        """A held back or resumed job: an Event saying why, and the metric."""
        first = settled.steps[0]
        if record.replicas == 0:
            action, reason = "suspended", first.reason
            message = f"{job.replicas} -> 0 workers, suspended ({first.reason}): {first.message}"
            self.cluster.event(job, reason="HeldBack", message=message)
        else:
            last = settled.steps[-1]
            action = "resumed"
            reason = last.reason if last.name == STARVATION_STEP else first.reason
            message = f"0 -> {record.replicas} workers, resumed ({reason}): {last.message}"
            self.cluster.event(job, reason="Resumed", message=message)
        if self.metrics:
            self.metrics.queueing.labels(action, reason).inc()

    def _write_ahead(self, job: ManagedJob, proposal: Step, *, now: datetime) -> ManagedJob | None:
        """Before a write, the stored state must hold the count the write changes: then a
        leader killed between its write and its state save leaves a state whose count differs
        from the job's, which the next leader counts as a rescale (its cooldown starting then).
        Without it a job's first rescale was never stored, and the next leader rescaled the job
        again in its first round (the fault matrix's engine case measured it). On a writer
        thread: only this job's entry of `_stored_replicas` is touched meanwhile.

        Returns the job to write under: as the save left it, while that is still the job and
        count decided from (the save moved its version: under the informer's, every first
        rescale met a 409 and read /scale again, 50 GETs and PUTs in bench-scale's first
        round); else `job`, whose write then reads and compares. None: nothing was stored."""
        if self._stored_replicas.get(job.key) == job.replicas:
            return job
        state = remember(
            self.states[job.key],
            recommendation=proposal.replicas,
            now=now,
            config=self.config.settle,
        )
        try:
            saved = self.cluster.save_state(job, state=state.to_json())
        except Exception:  # no write whose rescale could go uncounted
            log.exception("storing the state of %s/%s before a write failed", *job.key)
            return None
        self._stored_replicas[job.key] = state.replicas
        return saved if saved is not None and _decided_from(job, saved) else job

    def _changed(self, key: JobKey, state: JobState) -> bool:
        """Whether the state changed in substance since it was saved (or was never saved)."""
        saved = self._saved.get(key)
        return saved is None or saved[0] != essence(state)

    def _refreshes(
        self, unchanged: Sequence[tuple[ManagedJob, "Acted"]], *, now: datetime
    ) -> list[tuple[ManagedJob, "Acted"]]:
        """The unchanged states to rewrite this round: saved `state_save_seconds` ago or more,
        the longest ago first, at most `state_refreshes_per_round`. Without the cap every job
        saved in one round fell due in one round, rewriting thousands of annotations in a single
        round (bench-scale's soak)."""
        period = timedelta(seconds=self.config.state_save_seconds)
        due = [(job, done) for job, done in unchanged if now - self._saved[job.key][1] >= period]
        due.sort(key=lambda entry: self._saved[entry[0].key][1])
        return due[: self.config.state_refreshes_per_round]

    def finish_saves(self) -> None:
        """Wait for the last round's state saves; remember those that were stored (a failed
        one was logged, and its state is saved again next round). A round waits for its counts
        only, not for its state saves, which would lengthen it (measured by `make bench-scale`)."""
        for key, saving in self._saving.items():
            done = saving.result()
            if done.saved is not None:
                self._saved[key] = done.saved
                self._stored_replicas[key] = done.state.replicas
        self._saving.clear()

    def _save(self, job: ManagedJob, done: "Acted", now: datetime) -> "Acted":
        """On a writer thread: persist the state (a failure is logged; the next round retries)."""
        try:
            self.cluster.save_state(job, state=done.state.to_json())
        except Exception:  # the next round retries; the decision itself already happened
            log.exception("saving the state of %s/%s failed", job.namespace, job.name)
            return done
        return dataclasses.replace(done, saved=(essence(done.state), now))

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


@dataclass(frozen=True)
class Acted:
    """A job's round: its outcome, its new state, and the saved (essence, time) if it was saved."""

    outcome: Outcome
    state: JobState
    saved: tuple[Essence, datetime] | None = None


def _sized(job: ManagedJob) -> bool:
    """The engine sizes its own unfinished jobs, but never one its user suspended."""
    return job.owner is Owner.ENGINE and not job.finished and (job.held_back or not job.suspended)


def _with_declared_total(job: ManagedJob, progress: Progress | None) -> ManagedJob:
    """The job's total work: its annotation, else what its training helper reports."""
    reported = progress.total_samples if progress is not None else None
    if job.total_samples is not None or reported is None or not reported > 0:
        return job
    return dataclasses.replace(job, total_samples=reported)


def _decided_from(job: ManagedJob, saved: ManagedJob) -> bool:
    """Whether `saved` is still the job a decision about `job` was made for: the same object,
    owner and count (what a write after a 409 compares, too)."""
    return (saved.uid, saved.owner, saved.replicas) == (job.uid, job.owner, job.replicas)


def _held_reason(steps: Sequence[Step]) -> str:
    """Why a decision kept the job's count whatever the policy wished (a hold step, or the
    policy's fallback), else ""."""
    fallback = steps[0].reason if steps[0].reason.startswith("Policy") else ""
    held = [step.reason for step in steps if step.name == "hold"]
    return held[-1] if held else fallback


def essence(state: JobState) -> Essence:
    """What of a job's state must reach its annotation at once: what a new engine (after a
    restart or a change of leader) could not rebuild in its first round. That is the cooldown
    and restart budget (`last_rescale`, `rescales`, `restarts_spent`), the count, which counts
    have throughput (the points at counts the job left are frozen since the rescale that left
    them, which saved them), and why the job is held, if it is (the Event already sent; not a
    cooldown, which follows from `last_rescale`). The point at the current count is left out: a
    new engine's first round observes it again (with no reading the job is held anyway). What
    moves every round (that point's time, `accounted_at`, the recommendations, the policy's
    reason and message) reaches the annotation with the next substantive change, or after
    `state_save_seconds`: at 1,000 jobs, a policy's reason changing (OptimalAllocation to
    ScaleDownStabilized) rewrote 800 annotations in a round that changed no count."""
    left = sorted(n for n in state.throughput if n != state.replicas)
    decision = state.last_decision
    held = _held_reason(decision.steps) if decision is not None else ""
    return (
        state.replicas,
        state.requested,
        state.last_rescale,
        state.rescales,
        state.restarts_spent,
        state.forced_resume,
        left,
        "" if held in FOLLOWS_A_RESCALE else held,
    )
