"""What a round did (`RoundReport`), and how it is recorded: decision-log lines and metrics."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import OWNER_REASONS, JobKey, ManagedJob
from autoscaler.engine.settle import Settled, current, requested
from autoscaler.engine.state import PricedBatch
from autoscaler.observability.engine_metrics import EngineMetrics
from autoscaler.policies.contract import Snapshot


@dataclass(frozen=True)
class Outcome:
    job: ManagedJob
    settled: Settled
    written: bool = False
    error: str = ""
    observed: float | None = None
    predicted: float | None = None  # samples/s (a goodput job's at the batch it was priced at)
    goodput: PricedBatch | None = None  # a goodput job's pricing at its settled count

    @property
    def current(self) -> int:
        """The job's count after the round: the settled one if it was written."""
        return self.settled.replicas if self.written else current(self.job)


@dataclass(frozen=True)
class RoundReport:
    time: datetime
    policy: str
    snapshot: Snapshot
    solve_seconds: float
    objective: float
    fallback: str = ""  # the reason every count was kept, when the policy failed
    outcomes: tuple[Outcome, ...] = field(default_factory=tuple)

    def replicas(self) -> dict[JobKey, int]:
        return {outcome.job.key: outcome.settled.replicas for outcome in self.outcomes}


def log_records(report: RoundReport) -> list[dict[str, Any]]:
    remaining = {(j.namespace, j.name): j.remaining_samples for j in report.snapshot.jobs}
    return [
        {
            "time": report.time.isoformat(),
            "policy": report.policy,
            "objective": report.objective,
            "solve_seconds": report.solve_seconds,
            "namespace": o.job.namespace,
            "name": o.job.name,
            "min_replicas": o.job.min_replicas,
            "max_replicas": o.job.max_replicas,
            "replicas_before": current(o.job),
            "proposed": o.settled.steps[0].replicas,
            "replicas": o.settled.replicas,
            "reason": o.settled.reason,
            "message": o.settled.steps[-1].message,
            "steps": [step.model_dump() for step in o.settled.steps],
            "written": o.written,
            "error": o.error,
            "observed_samples_per_second": o.observed,
            "predicted_samples_per_second": o.predicted,
            "remaining_samples": remaining.get((o.job.namespace, o.job.name)),
            "goodput": goodput_record(o.goodput),
        }
        for o in report.outcomes
    ]


def goodput_record(priced: PricedBatch | None) -> dict[str, Any] | None:
    """A goodput job's pricing as the decision log shows it: its noise scale, the batch chosen at
    its settled count, that batch's efficiency and the goodput it was priced at, and the batch
    the job reports running at that count with its share of that goodput."""
    if priced is None:
        return None
    running = priced.running
    return {
        "noise_scale": priced.noise_scale,
        "base_batch": priced.base_batch,
        "replicas": priced.replicas,
        **priced.batch.model_dump(),
        "goodput": priced.goodput,
        "running": None
        if running is None
        else {**running.model_dump(), "share_of_goodput": priced.running_share},
    }


def export(metrics: EngineMetrics, report: RoundReport, *, capacity: Mapping[str, float]) -> None:
    metrics.rounds.labels("fallback" if report.fallback else "ok").inc()
    if report.fallback:
        metrics.fallbacks.labels(report.fallback).inc()
    metrics.solve_seconds.observe(report.solve_seconds)
    metrics.objective.set(report.objective)
    for o in report.outcomes:
        labels = (o.job.namespace, o.job.name)
        metrics.decisions.labels(o.settled.reason).inc()
        metrics.desired.labels(*labels).set(o.settled.replicas)
        metrics.current.labels(*labels).set(o.current)
        metrics.minimum.labels(*labels).set(o.job.min_replicas)
        metrics.maximum.labels(*labels).set(o.job.max_replicas)
        if o.observed is not None:
            metrics.observed.labels(*labels).set(o.observed)
        if o.predicted is not None:
            metrics.predicted.labels(*labels).set(o.predicted)
        if o.goodput is not None:
            metrics.goodput.labels(*labels).set(o.goodput.goodput)
            metrics.efficiency.labels(*labels).set(o.goodput.batch.efficiency)
            metrics.global_batch.labels(*labels).set(o.goodput.batch.global_batch)
            metrics.priced.add(labels)
        else:  # not (or no longer) priced by goodput: no stale price
            metrics.forget_goodput(*labels)
    counts = {o.job.key: o.current for o in report.outcomes}
    used = requested([o.job for o in report.outcomes], counts, capacity=capacity)
    for resource, available in capacity.items():
        metrics.capacity.labels(resource).set(available)
        metrics.capacity_used.labels(resource).set(used[resource])


def count_others(metrics: EngineMetrics, jobs: Sequence[ManagedJob]) -> None:
    """A decision per round for each unfinished elastic job someone else sizes, by its owner's
    reason (`ManagedByKueue`, ...): the dashboards' decision panels show them with the rest."""
    for job in jobs:
        if job.owner is not Owner.ENGINE and not job.finished:
            metrics.decisions.labels(OWNER_REASONS[job.owner]).inc()
