"""The capacity the engine may hand out: what Ready, schedulable nodes can allocate, less what
the pods bound to them request."""

from collections.abc import Sequence
from typing import Any

from autoscaler.api.quantity import parse_resources
from autoscaler.clients.jobs import pod_requests

JSON = dict[str, Any]


def free_capacity(
    nodes: Sequence[JSON], pods: Sequence[JSON]
) -> tuple[dict[str, float], list[tuple[JSON, str]]]:
    """Allocatable of Ready, schedulable `nodes` minus the requests of `pods`, and the pods left
    out because their requests could not be read: one such pod once made every round fail, and
    no job was sized until it was gone."""
    totals: dict[str, float] = {}
    for node in nodes:
        if _usable(node):
            for name, amount in parse_resources(node["status"].get("allocatable") or {}).items():
                totals[name] = totals.get(name, 0.0) + amount
    skipped = []
    for pod in pods:
        try:
            requests = pod_requests(pod)
        except ValueError as error:
            skipped.append((pod, str(error)))
            continue
        for name, amount in requests.items():
            if name in totals:
                totals[name] -= amount
    return {name: max(0.0, amount) for name, amount in totals.items()}, skipped


def _usable(node: JSON) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions)
