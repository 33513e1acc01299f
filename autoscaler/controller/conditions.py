"""Job conditions with upstream's mechanics (`pkg/util/status.go`), as pure functions."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api import operator_annotations as oa
from autoscaler.api.models import JSON
from autoscaler.api.timestamps import format_timestamp

CREATED, RUNNING, RESTARTING = "Created", "Running", "Restarting"
SUCCEEDED, SUSPENDED, FAILED = "Succeeded", "Suspended", "Failed"
# Not upstream lifecycle conditions: they are kept first so `conditions[-1]` stays the state.
HPA_CONDITION = "HorizontalPodAutoscaler"
GANG_CONDITION = c.CONDITION_GANG_SCHEDULED
QUOTA_CONDITION = c.CONDITION_QUOTA_ADMITTED
FAULT_TOLERANCE = oa.FAULT_TOLERANCE.condition  # False while the torchft annotation cannot be run
RENDEZVOUS = oa.RENDEZVOUS.condition  # False while the rendezvous store annotation cannot be run
REASON_PREFIX = "PyTorchJob"


@dataclass(frozen=True, kw_only=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


def reason(suffix: str) -> str:
    return f"{REASON_PREFIX}{suffix}"


def has_condition(conditions: list[JSON], type_: str, status: str = "True") -> bool:
    return any(cond["type"] == type_ and cond["status"] == status for cond in conditions)


def is_finished(conditions: list[JSON]) -> bool:
    return has_condition(conditions, SUCCEEDED) or has_condition(conditions, FAILED)


def set_condition(conditions: list[JSON], new: Condition, *, now: datetime) -> list[JSON]:
    """Upstream `setCondition`: nothing after Failed; no-op on same status and reason."""
    if has_condition(conditions, FAILED):
        return conditions
    current = next((cond for cond in conditions if cond["type"] == new.type), None)
    if current and current["status"] == new.status and current.get("reason") == new.reason:
        return conditions
    stamp = format_timestamp(now)
    kept = current is not None and current["status"] == new.status
    entry = {
        "type": new.type,
        "status": new.status,
        "reason": new.reason,
        "message": new.message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": current["lastTransitionTime"] if current and kept else stamp,
    }
    return [*_filter_out(conditions, new.type), entry]


def _filter_out(conditions: list[JSON], type_: str) -> list[JSON]:
    out = []
    for cond in conditions:
        if cond["type"] == type_ or {cond["type"], type_} == {RUNNING, RESTARTING}:
            continue
        finishing = type_ in (FAILED, SUCCEEDED) and cond["type"] == RUNNING
        out.append({**cond, "status": "False"} if finishing else cond)
    return out


def set_side_condition(
    conditions: list[JSON], new: Condition | None, *, now: datetime, type_: str = HPA_CONDITION
) -> list[JSON]:
    """Set (or, with None, remove) a non-lifecycle condition, kept at the front of the list."""
    type_ = new.type if new is not None else type_
    current = next((cond for cond in conditions if cond["type"] == type_), None)
    rest = [cond for cond in conditions if cond["type"] != type_]
    if new is None:
        return rest
    if current and (current["status"], current.get("reason")) == (new.status, new.reason):
        return conditions
    stamp = format_timestamp(now)
    entry: dict[str, Any] = {**new.__dict__, "lastUpdateTime": stamp, "lastTransitionTime": stamp}
    return [entry, *rest]
