"""Which job an object's change concerns: the work queue's keys and the caches' index keys of
pods, services, PodGroups and Workloads."""

from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.controller.claims import controller_uid

JSON = dict[str, Any]
JobKey = tuple[str, str]  # (namespace, name), as the informers key objects


def owning_job_key(obj: JSON) -> JobKey | None:
    """The job that controls `obj` (a PodGroup), from its controller owner reference."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == c.KIND:
            return obj["metadata"].get("namespace", ""), ref.get("name", "")
    return None


def job_key_of(obj: JSON) -> JobKey:
    """The job an owned pod or service belongs to, from its job-name label."""
    labels = obj["metadata"].get("labels") or {}
    return obj["metadata"].get("namespace", ""), labels.get(c.LABEL_JOB_NAME, "")


def owned_keys(obj: JSON) -> list[Any]:
    """A pod's or service's index keys: its job by label, and its controller by uid (which
    finds the job's own whose labels no longer match, to release them)."""
    uid = controller_uid(obj)
    return [job_key_of(obj)] + ([("owner", uid)] if uid is not None else [])


def controller_uid_keys(obj: JSON) -> list[Any]:
    """A Workload's index key: the uid of the job that controls it."""
    uid = controller_uid(obj)
    return [] if uid is None else [uid]


def controlled_by(obj: JSON, uid: str | None) -> bool:
    """`obj`'s controller owner reference names `uid`."""
    refs = obj["metadata"].get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)
