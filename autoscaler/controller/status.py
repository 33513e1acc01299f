"""Replica counts from pods (upstream `core/status.go`) and semantic comparison of specs."""

from typing import Any

from autoscaler.api.models import JSON
from autoscaler.controller.pods import is_terminating, phase


def count_replicas(pods: list[JSON]) -> JSON:
    """active/succeeded/failed, zeros omitted as upstream's `omitempty` does."""
    counts = {"active": 0, "succeeded": 0, "failed": 0}
    for pod in pods:
        current = phase(pod)
        if current == "Running":
            counts["failed" if is_terminating(pod) else "active"] += 1
        elif current == "Succeeded":
            counts["succeeded"] += 1
        elif current == "Failed":
            counts["failed"] += 1
    return {key: value for key, value in counts.items() if value}


def is_subset(desired: Any, observed: Any) -> bool:
    """True when every field we set has the same value in what the server holds.

    The server adds defaults we never set; those are not a difference worth a write.
    """
    if isinstance(desired, dict) and isinstance(observed, dict):
        return all(
            key in observed and is_subset(value, observed[key]) for key, value in desired.items()
        )
    if isinstance(desired, list) and isinstance(observed, list):
        return len(desired) == len(observed) and all(map(is_subset, desired, observed))
    return bool(desired == observed)
