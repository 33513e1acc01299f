"""Replica counts from pods (upstream `core/status.go`) and semantic comparison of specs."""

from typing import Any

from autoscaler.api.models import JSON
from autoscaler.api.quantity import exact_quantity
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


QUANTITY_FIELDS = frozenset({"value", "averageValue"})  # autoscaling/v2 MetricTarget


def by_value(spec: Any) -> Any:
    """`spec` with every metric target quantity as a number: the API server stores `1000m` as
    `1` and `"0.5"` as `500m`, which a comparison as text would rewrite on every pass."""
    if isinstance(spec, list):
        return [by_value(item) for item in spec]
    if not isinstance(spec, dict):
        return spec
    return {
        key: _quantity(value) if key in QUANTITY_FIELDS else by_value(value)
        for key, value in spec.items()
    }


def _quantity(value: Any) -> Any:
    try:
        return exact_quantity(value)
    except (TypeError, ValueError):
        return value  # not ours to judge: the API server validates the HPA
