"""Which pods and services a job claims: upstream's `ClaimObject` cases
(kubeflow/training-operator v1.9.4, `pkg/controller.v1/control/controller_ref_manager.go`)."""

from typing import Any

import pytest

from autoscaler.controller.claims import (
    Action,
    adoption_patch,
    claim,
    claims,
    controller_uid,
    release_patch,
)

JSON = dict[str, Any]
JOB_LABELS = {
    "training.kubeflow.org/operator-name": "pytorchjob-controller",
    "training.kubeflow.org/job-name": "echo",
}
DELETING = {"deletionTimestamp": "2026-01-01T00:00:00Z"}


def job(**metadata: Any) -> JSON:
    return {"metadata": {"name": "echo", "namespace": "ns", "uid": "job-uid", **metadata}}


def pod(*, labels: dict[str, str] = JOB_LABELS, owner: str | None = None, **metadata: Any) -> JSON:
    refs = [{"kind": "PyTorchJob", "name": "x", "uid": owner, "controller": True}] if owner else []
    meta = {"name": "p", "uid": "pod-uid", "labels": dict(labels), "ownerReferences": refs}
    return {"metadata": {**meta, **metadata}}


OTHER_JOBS_LABELS = {**JOB_LABELS, "training.kubeflow.org/job-name": "other"}
NON_CONTROLLER_REF = [{"kind": "ConfigMap", "name": "c", "uid": "cm-uid"}]


@pytest.mark.parametrize(
    ("obj", "owner_job", "action"),
    [
        (pod(owner="job-uid"), job(), "own"),
        (pod(owner="job-uid"), job(**DELETING), "own"),  # owning takes no action
        (pod(), job(), "adopt"),
        (pod(ownerReferences=NON_CONTROLLER_REF), job(), "adopt"),  # no controller reference
        (pod(labels={**JOB_LABELS, "extra": "kept"}), job(), "adopt"),  # a selector, not equality
        (pod(), job(**DELETING), "ignore"),  # the job is going away
        (pod(**DELETING), job(), "ignore"),  # the orphan is going away
        (pod(labels=OTHER_JOBS_LABELS), job(), "ignore"),  # another job's labels
        (pod(labels={"training.kubeflow.org/job-name": "echo"}), job(), "ignore"),  # half a match
        (pod(owner="replicaset-uid"), job(), "ignore"),  # another controller's
        (pod(owner="replicaset-uid", labels=OTHER_JOBS_LABELS), job(), "ignore"),
        (pod(owner="job-uid", labels=OTHER_JOBS_LABELS), job(), "release"),
        (pod(owner="job-uid", labels={}), job(), "release"),
        (pod(owner="job-uid", labels=OTHER_JOBS_LABELS), job(**DELETING), "ignore"),
    ],
    ids=[
        "own",
        "own while the job is deleted",
        "orphan",
        "orphan with a non-controller reference",
        "orphan with more labels",
        "orphan of a job being deleted",
        "orphan being deleted",
        "orphan of other labels",
        "orphan missing a label",
        "another controller's",
        "another controller's, other labels",
        "own, relabelled",
        "own, labels removed",
        "own, relabelled, job being deleted",
    ],
)
def test_claim(obj: JSON, owner_job: JSON, action: Action) -> None:
    assert claim(obj, job=owner_job) == action


def test_claims_decide_each_object_once() -> None:
    orphan, own = pod(name="a", uid="a"), pod(name="b", uid="b", owner="job-uid")
    decided = claims([orphan, own, own], job=job())
    assert (decided["adopt"], decided["own"]) == ([orphan], [own])
    assert decided["release"] == decided["ignore"] == []


def test_patches_are_upstreams() -> None:
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "uid": "job-uid"}
    assert adoption_patch(pod(), owner) == {
        "metadata": {"ownerReferences": [owner], "uid": "pod-uid"}
    }
    assert release_patch(pod(), "job-uid") == {
        "metadata": {"ownerReferences": [{"$patch": "delete", "uid": "job-uid"}], "uid": "pod-uid"}
    }


@pytest.mark.parametrize(
    ("refs", "uid"),
    [([], None), (NON_CONTROLLER_REF, None), ([{"uid": "u", "controller": True}], "u")],
)
def test_controller_uid(refs: list[JSON], uid: str | None) -> None:
    assert controller_uid(pod(ownerReferences=refs)) == uid
