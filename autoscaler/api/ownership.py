"""Who writes a job's worker count: exactly one writer per job, read from the job alone."""

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api.annotations import opted_out
from autoscaler.api.models import PyTorchJob


class Owner(StrEnum):
    """Who writes a job's worker count: exactly one writer per job."""

    ENGINE = "engine"
    HPA = "hpa"  # elasticPolicy.metrics is set: the job's HorizontalPodAutoscaler owns /scale
    OPTED_OUT = "opted-out"  # the opt-out annotation is set: nobody but the user writes it
    KUEUE = "kueue"  # labelled for a Kueue queue: Kueue admits it at its size, a resize requeues it


def job_owner(job: PyTorchJob) -> Owner:
    """`owner` of a job as the models hold it."""
    annotations = job.metadata.annotations or {}
    policy = job.spec.elastic_policy
    return owner(
        {"metrics": policy.metrics if policy is not None else None},
        annotations=annotations,
        queue=(job.metadata.labels or {}).get(c.LABEL_KUEUE_QUEUE_NAME, ""),
        opted_out=opted_out(annotations),
    )


def owner(
    policy: Mapping[str, Any], *, annotations: Mapping[str, str], queue: str, opted_out: bool
) -> Owner:
    """One writer per job: Kueue when it queues the job (its admission fixes the size, even
    against an HPA) unless the job opted into Kueue's workload slices (the operator's Kueue
    integration turns its resizes into slices Kueue admits), its HPA when metrics are declared,
    nobody when it opted out."""
    if queue and annotations.get(c.ANNOTATION_KUEUE_ELASTIC) != "true":
        return Owner.KUEUE
    if policy.get("metrics"):
        return Owner.HPA
    if opted_out:
        return Owner.OPTED_OUT
    return Owner.ENGINE
