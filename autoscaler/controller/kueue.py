"""Kueue's API as the operator's own Kueue integration reads it: its names, a job's Kueue labels,
and a Workload's conditions, counts and chain of slices (sigs.k8s.io/kueue v0.19)."""

from typing import Final

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON
from autoscaler.controller import torchft

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
# This kind as Kueue's `integrations.externalFrameworks` names it (Kind.version.group).
EXTERNAL_FRAMEWORK: Final = f"{c.KIND}.{c.VERSION}.{c.GROUP}"
ANNOTATION_ELASTIC: Final = c.ANNOTATION_KUEUE_ELASTIC
ANNOTATION_REPLACEMENT_FOR: Final = f"{GROUP}/workload-slice-replacement-for"
LABEL_JOB_UID: Final = f"{GROUP}/job-uid"
LABEL_PRIORITY_CLASS: Final = f"{GROUP}/priority-class"  # a WorkloadPriorityClass's name
# Kueue's own integrations put it on their Workloads; a taken-over one may carry it.
FINALIZER: Final = f"{GROUP}/resource-in-use"
# Workload condition types and reasons (Kueue's `apis/kueue/v1beta2/workload_types.go`).
QUOTA_RESERVED, ADMITTED, EVICTED = "QuotaReserved", "Admitted", "Evicted"
FINISHED, REQUEUED = "Finished", "Requeued"
PREEMPTED, NODE_FAILURES = "Preempted", "NodeFailures"  # the evictions Kueue requeues at once
PENDING_EVALUATION = "PendingEvaluation"
LIGHTHOUSE_POD_SET: Final = torchft.LIGHTHOUSE_TYPE


def queued(job: JSON) -> bool:
    return bool(((job.get("metadata") or {}).get("labels") or {}).get(c.LABEL_KUEUE_QUEUE_NAME))


def elastic(job: JSON) -> bool:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_ELASTIC) == "true"


def workload_conditions(workload: JSON) -> list[JSON]:
    return list((workload.get("status") or {}).get("conditions") or [])


def has(workload: JSON, type_: str) -> bool:
    return any(
        cond["type"] == type_ and cond["status"] == "True" for cond in workload_conditions(workload)
    )


def reserved(workload: JSON) -> bool:
    return has(workload, QUOTA_RESERVED) and bool((workload.get("status") or {}).get("admission"))


def is_admitted(workload: JSON) -> bool:
    return has(workload, ADMITTED) and reserved(workload)


def counts(workload: JSON) -> dict[str, int]:
    return {ps["name"]: int(ps.get("count", 1)) for ps in workload["spec"]["podSets"]}


def admitted_counts(workload: JSON) -> dict[str, int]:
    sizes = counts(workload)
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        if assignment.get("count") is not None:
            sizes[assignment["name"]] = min(sizes[assignment["name"]], int(assignment["count"]))
    return sizes


def key(workload: JSON) -> str:
    """Kueue's workload reference, `namespace/name` (the replacement annotation's value)."""
    return f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"


def _created(workload: JSON) -> tuple[str, str]:
    return workload["metadata"].get("creationTimestamp", ""), workload["metadata"].get("uid", "")


def chain(workloads: list[JSON]) -> tuple[JSON | None, JSON | None]:
    """(the admitted slice, the pending one replacing it), as Kueue's `normalizeActiveSlices`
    picks them from the unfinished Workloads: the newest non-evicted one with quota whose
    replacement holds none, and its replacement. Without an admitted one: (None, the newest
    non-evicted)."""
    live = sorted((w for w in workloads if not has(w, FINISHED)), key=_created)
    replacing = {
        w["metadata"]["annotations"][ANNOTATION_REPLACEMENT_FOR]: w
        for w in live
        if ANNOTATION_REPLACEMENT_FOR in (w["metadata"].get("annotations") or {})
        and not has(w, EVICTED)
    }
    current, newest = None, None
    for workload in live:
        if has(workload, EVICTED):
            continue
        newest = workload
        successor = replacing.get(key(workload))
        if reserved(workload) and not (successor is not None and reserved(successor)):
            current = workload
    if current is None:
        return None, newest
    return current, replacing.get(key(current))


def eviction(workload: JSON) -> JSON | None:
    return next(
        (
            cond
            for cond in workload_conditions(workload)
            if cond["type"] == EVICTED and cond["status"] == "True"
        ),
        None,
    )
