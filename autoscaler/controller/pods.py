"""Reading the facts the operator needs from observed pods and services (plain JSON)."""

from datetime import UTC, datetime

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON
from autoscaler.api.timestamps import parse_timestamp


def phase(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminating(obj: JSON) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def replica_type_of(obj: JSON) -> str | None:
    """`Worker`/`Master` from the lowercase replica-type label."""
    label = ((obj.get("metadata") or {}).get("labels") or {}).get(c.LABEL_REPLICA_TYPE, "")
    return next((known for known in c.REPLICA_TYPES if known.lower() == label), None)


def replica_index(obj: JSON) -> int | None:
    label = ((obj.get("metadata") or {}).get("labels") or {}).get(c.LABEL_REPLICA_INDEX, "")
    return int(label) if label.isdigit() else None


def exit_code(pod: JSON) -> int | None:
    """The terminated exit code of the `pytorch` container, if it has one."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == c.DEFAULT_CONTAINER_NAME:
            terminated = (status.get("state") or {}).get("terminated") or {}
            code = terminated.get("exitCode")
            return int(code) if code is not None else None
    return None


def container_statuses(pod: JSON) -> list[JSON]:
    """The statuses of the pod's init containers, then of its containers."""
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def latest_condition(pod: JSON) -> JSON | None:
    """The pod condition that changed last (the first of those that changed together)."""
    conditions: list[JSON] = (pod.get("status") or {}).get("conditions") or []
    if not conditions:
        return None
    return max(conditions, key=lambda cond: _transition(cond.get("lastTransitionTime")))


def _transition(stamp: str | None) -> datetime:
    return parse_timestamp(stamp) if stamp else datetime.min.replace(tzinfo=UTC)


def restart_count(pod: JSON) -> int:
    return sum(int(container.get("restartCount") or 0) for container in container_statuses(pod))
