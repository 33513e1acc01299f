"""Deliberate regressions of this operator's plan, for proving the conformance suite fails on
them: each takes the plan's objects (or their recorded observation) and returns them broken."""

from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def wrong_rendezvous(objects: list[JSON]) -> list[JSON]:
    """Every pod's `PET_RDZV_CONF` set to a value no documented difference allows."""
    return [_with_env(o, "PET_RDZV_CONF", "last_call_timeout=30") for o in objects]


def missing_service(objects: list[JSON]) -> list[JSON]:
    """The first Service left out."""
    first = next(i for i, o in enumerate(objects) if o["kind"] == "Service")
    return objects[:first] + objects[first + 1 :]


def required_packing(objects: list[JSON]) -> list[JSON]:
    """Every pod's preferred pod affinity made required: workers that wait for each other's node."""
    return [_required(o) for o in objects]


def _required(obj: JSON) -> JSON:
    affinity = (obj.get("spec") or {}).get("affinity") or {}
    preferred = (affinity.get("podAffinity") or {}).get(PREFERRED)
    if obj["kind"] != "Pod" or not preferred:
        return obj
    terms = [term["podAffinityTerm"] for term in preferred]
    pod_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    return {**obj, "spec": {**obj["spec"], "affinity": {**affinity, "podAffinity": pod_affinity}}}


def _with_env(obj: JSON, name: str, value: str) -> JSON:
    if obj["kind"] != "Pod":
        return obj
    containers = [
        {
            **ct,
            "env": [
                {"name": name, "value": value} if var.get("name") == name else var
                for var in ct.get("env", [])
            ],
        }
        for ct in obj["spec"]["containers"]
    ]
    return {**obj, "spec": {**obj["spec"], "containers": containers}}


def wrong_condition_reason(observation: JSON) -> JSON:
    """A recorded lifecycle in which this operator wrote every `PyTorchJobRunning` reason as
    `JobRunning`."""
    steps = [[step, _renamed_reason(ours), theirs] for step, ours, theirs in observation["steps"]]
    return {**observation, "steps": steps}


def _renamed_reason(reading: JSON) -> JSON:
    status = reading["status"]
    if not isinstance(status, dict):  # the job is gone
        return reading
    conditions = [
        {**cond, "reason": "JobRunning"} if cond.get("reason") == "PyTorchJobRunning" else cond
        for cond in status.get("conditions", [])
    ]
    return {**reading, "status": {**status, "conditions": conditions}}


BREAKAGES: tuple[Callable[[list[JSON]], list[JSON]], ...] = (
    wrong_rendezvous,
    missing_service,
    required_packing,
)
