"""Which pods and services a job owns, as upstream's `ClaimPods` and `ClaimServices` decide it
(kubeflow/training-operator v1.9.4, `pkg/controller.v1/control/controller_ref_manager.go`):
orphans matching the job's selector are adopted, its own that no longer match are released, and
what another controller owns is left alone. Pure: the runner sends the patches."""

from typing import Any, Literal

from autoscaler.controller.naming import job_labels

JSON = dict[str, Any]
Action = Literal["own", "adopt", "release", "ignore"]


def controller_uid(obj: JSON) -> str | None:
    """The uid of `obj`'s controller owner, None for an orphan."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid", ""))
    return None


def matches(obj: JSON, job_name: str) -> bool:
    """Whether `obj`'s labels match the job's selector (upstream's `GenLabels`)."""
    labels = obj["metadata"].get("labels") or {}
    return job_labels(job_name).items() <= labels.items()


def claim(obj: JSON, *, job: JSON) -> Action:
    """`ClaimObject` for one object and one job."""
    deleting = bool(job["metadata"].get("deletionTimestamp"))
    match = matches(obj, job["metadata"]["name"])
    owner = controller_uid(obj)
    if owner is not None:
        if owner != job["metadata"].get("uid"):
            return "ignore"  # another controller's
        if match:
            return "own"
        return "ignore" if deleting else "release"
    if deleting or not match or obj["metadata"].get("deletionTimestamp"):
        return "ignore"
    return "adopt"


def claims(candidates: list[JSON], *, job: JSON) -> dict[Action, list[JSON]]:
    """Each object once (by uid), under what `claim` decides for it."""
    by_uid = {obj["metadata"].get("uid") or obj["metadata"]["name"]: obj for obj in candidates}
    decided: dict[Action, list[JSON]] = {"own": [], "adopt": [], "release": [], "ignore": []}
    for obj in by_uid.values():
        decided[claim(obj, job=job)].append(obj)
    return decided


def adoption_patch(obj: JSON, owner: JSON) -> JSON:
    """Upstream's `AdoptPod` patch (strategic merge): the controller reference, on the object of
    that uid only (the API server refuses it if another controller reference exists)."""
    return {"metadata": {"ownerReferences": [owner], "uid": obj["metadata"]["uid"]}}


def release_patch(obj: JSON, job_uid: str) -> JSON:
    """Upstream's `ReleasePod` patch (strategic merge): the job's reference removed."""
    return {
        "metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": job_uid}],
            "uid": obj["metadata"]["uid"],
        }
    }
