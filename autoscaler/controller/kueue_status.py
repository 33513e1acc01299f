"""New states of a Workload the integration writes: finished, its quota handed back after an
eviction, its counts resized, and Kueue's finalizer released."""

import copy
from collections.abc import Mapping
from datetime import datetime

from autoscaler.api.models import JSON
from autoscaler.api.timestamps import format_timestamp
from autoscaler.controller.kueue import (
    ADMITTED,
    FINALIZER,
    FINISHED,
    NODE_FAILURES,
    PENDING_EVALUATION,
    PREEMPTED,
    QUOTA_RESERVED,
    REQUEUED,
    has,
    workload_conditions,
)


def _condition(type_: str, status: str, reason: str, message: str, now: datetime) -> JSON:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_timestamp(now),
    }


def _set(conditions: list[JSON], new: JSON) -> list[JSON]:
    """Kueue's `SetStatusCondition`: the transition time moves only with the status."""
    old = next((cond for cond in conditions if cond["type"] == new["type"]), None)
    if old is not None and old["status"] == new["status"]:
        new = {
            **new,
            "lastTransitionTime": old.get("lastTransitionTime", new["lastTransitionTime"]),
        }
    return [cond for cond in conditions if cond["type"] != new["type"]] + [new]


def with_finished(workload: JSON, reason: str, message: str, now: datetime) -> JSON:
    new = copy.deepcopy(workload)
    status = new.setdefault("status", {})
    status["conditions"] = _set(
        workload_conditions(new), _condition(FINISHED, "True", reason, message, now)
    )
    return new


def without_reservation(workload: JSON, eviction: JSON, now: datetime) -> JSON:
    """The quota handed back after an eviction, once the pods are gone (Kueue's
    `SetRequeuedCondition` and `UnsetQuotaReservationWithCondition`)."""
    new = copy.deepcopy(workload)
    status = new.setdefault("status", {})
    conditions = workload_conditions(new)
    message = eviction.get("message", "")
    requeued = "True" if eviction.get("reason") in (PREEMPTED, NODE_FAILURES) else "False"
    conditions = _set(
        conditions, _condition(REQUEUED, requeued, eviction.get("reason", ""), message, now)
    )
    conditions = _set(
        conditions, _condition(QUOTA_RESERVED, "False", PENDING_EVALUATION, message, now)
    )
    if has(new, ADMITTED):
        conditions = _set(conditions, _condition(ADMITTED, "False", "NoReservation", message, now))
    status["conditions"] = conditions
    status.pop("admission", None)
    return new


def with_counts(workload: JSON, sizes: Mapping[str, int]) -> JSON:
    new = copy.deepcopy(workload)
    for pod_set in new["spec"]["podSets"]:
        pod_set["count"] = sizes[pod_set["name"]]
    return new


def released(workloads: list[JSON]) -> list[JSON]:
    """Finished or deleted Workloads without Kueue's finalizer (one created by Kueue's built-in
    integration before the operator took over), as Kueue's job reconciler removes it."""
    result = []
    for workload in workloads:
        finalizers = workload["metadata"].get("finalizers") or []
        gone = has(workload, FINISHED) or workload["metadata"].get("deletionTimestamp")
        if FINALIZER in finalizers and gone:
            new = copy.deepcopy(workload)
            new["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
            result.append(new)
    return result
