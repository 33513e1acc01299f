"""`explain`: everything the engine knows and did about one job, as plain data (pure)."""

from datetime import datetime
from typing import Any

import numpy as np

from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import OWNER_REASONS, HpaStatus, ManagedJob
from autoscaler.engine.report import goodput_record
from autoscaler.engine.settle import restarts_left
from autoscaler.engine.snapshot import job_snapshot
from autoscaler.engine.state import JobState
from autoscaler.policies.speedup import job_curve
from autoscaler.policies.throughput_model import ThroughputModel

JSON = dict[str, Any]
OWNERS = {
    Owner.ENGINE: "the policy engine writes its worker count through /scale",
    Owner.HPA: "its HorizontalPodAutoscaler (elasticPolicy.metrics): the engine never writes it",
    Owner.OPTED_OUT: "nobody but its user: the opt-out annotation is set",
    Owner.KUEUE: "Kueue admits it at the size in its spec and requeues it after a resize:"
    " the engine never writes it",
}


def explain(
    job: ManagedJob | None,
    *,
    name: str,
    hpa: HpaStatus | None,
    now: datetime,
    model: ThroughputModel,
    workers: JSON | None = None,
) -> JSON:
    """The job's owner, bounds, where its workers are, throughput points and fitted curve, and its
    latest decisions.

    `job`: None when the PyTorchJob `name` (`namespace/name`) is not elastic. `workers`: where
    its workers are (`autoscaler.controller.planned_placement.worker_layout`), when read."""
    if job is None:
        return {"job": name, "elastic": False, "owner": "the operator only: not elastic"}
    state = JobState.from_json(job.state)
    return {
        "job": name,
        "elastic": True,
        "owner": job.owner.value,
        "owner_reason": OWNER_REASONS[job.owner],
        "owner_explained": OWNERS[job.owner],
        "hpa": _hpa(hpa) if job.owner is Owner.HPA else None,
        "queue": job.queue or None,
        "replicas": {"spec": job.replicas, "active": job.active},
        "workers": workers,
        "bounds": {"min": job.min_replicas, "max": job.max_replicas},
        "resources_per_replica": dict(job.resources_per_replica),
        "weight": job.weight,
        "restarts": _restarts(job, state),
        "work": _work(job, state),
        "last_rescale": state.last_rescale.isoformat() if state.last_rescale else None,
        "queueing": _queueing(job, state),
        "recovery": _recovery(state),
        "throughput": _points(state, now=now),
        "curve": _curve(job, state, now=now, model=model),
        "goodput": goodput_record(state.goodput),
        "decisions": [record.model_dump(mode="json") for record in reversed(state.decisions)],
    }


def _recovery(state: JobState) -> JSON:
    """Why the job's world was not whole when its state was last saved, and when it last was
    not (`Recovering` holds it `settle_seconds` after that)."""
    return {
        "disturbance": state.disturbance or None,
        "disturbed_at": state.disturbed_at.isoformat() if state.disturbed_at else None,
    }


def _queueing(job: ManagedJob, state: JobState) -> JSON:
    """Whether the job may be held back, whether it is (and by whom), and how often it was."""
    by = "engine" if job.held_back else "user" if job.suspended else None
    return {
        "preemptible": job.preemptible,
        "suspended_by": by,
        "held_since": job.held_since.isoformat() if job.held_back and job.held_since else None,
        "suspensions": state.suspensions,
        "forced_resume": state.forced_resume.isoformat() if state.forced_resume else None,
    }


def _hpa(hpa: HpaStatus | None) -> JSON | None:
    if hpa is None:
        return None
    return {
        "name": hpa.name,
        "desired_replicas": hpa.desired_replicas,
        "conditions": [
            f"{cond.type}={cond.status} {cond.reason}: {cond.message}" for cond in hpa.conditions
        ],
    }


def _restarts(job: ManagedJob, state: JobState) -> JSON:
    return {
        "rescales": state.rescales,
        "max_restarts": job.max_restarts,
        "remaining": restarts_left(job, state),
    }


def _work(job: ManagedJob, state: JobState) -> JSON:
    """What the job declared and what the engine counted of its progress and service."""
    return {
        "total_samples": job.total_samples,
        "samples_done": state.samples_done,
        "attained_worker_seconds": state.attained_seconds,
        "allowed_replicas": list(job.allowed_replicas) if job.allowed_replicas else None,
        "ignored_annotations": list(job.problems),
    }


def _points(state: JobState, *, now: datetime) -> list[JSON]:
    return [
        {
            "replicas": count,
            "samples_per_second": point.samples_per_second,
            "age_seconds": round((now - point.observed_at).total_seconds(), 1),
        }
        for count, point in sorted(state.throughput.items())
    ]


def _curve(
    job: ManagedJob, state: JobState, *, now: datetime, model: ThroughputModel
) -> list[JSON]:
    """T(n) over the job's range: observed, fitted, or not to be chosen yet (exploration bound)."""
    curve = job_curve(job_snapshot(job, state, now=now), model=model)
    rows = []
    for offset, value in enumerate(curve.throughput):
        count = job.min_replicas + offset
        source = "observed" if count in state.throughput else "fitted"
        known = bool(np.isfinite(value))
        rows.append(
            {
                "replicas": count,
                "samples_per_second": float(value) if known else None,
                "source": source if known else "unexplored",
            }
        )
    return rows
