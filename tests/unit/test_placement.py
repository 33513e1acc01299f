"""The packing affinity: an elastic job's workers prefer nodes that run the job's other workers,
beside whatever affinity their template declares; other pods are built as upstream's."""

import copy
from typing import Any

import pytest

from autoscaler import fault_tolerance as ft
from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller import rendezvous
from autoscaler.controller.builders import desired_pod
from autoscaler.controller.placement import packed_with_workers
from autoscaler.controller.rendezvous import desired_store_pod
from autoscaler.controller.torchft import desired_lighthouse_pod
from tests.unit.test_reconcile import job

JSON = dict[str, Any]
ELASTIC = {"minReplicas": 1, "maxReplicas": 4}
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
WORKERS = {
    "training.kubeflow.org/operator-name": "pytorchjob-controller",
    "training.kubeflow.org/job-name": "j",
    "training.kubeflow.org/replica-type": "worker",
}
PACK = {
    "weight": 100,
    "podAffinityTerm": {
        "labelSelector": {"matchLabels": WORKERS},
        "topologyKey": "kubernetes.io/hostname",
    },
}
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
NODE = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}]}}}
CACHE = {
    "labelSelector": {"matchLabels": {"app": "cache"}},
    "topologyKey": "kubernetes.io/hostname",
}
NEAR_CACHE = {"weight": 10, "podAffinityTerm": CACHE}
APART = {"podAntiAffinity": {PREFERRED: [NEAR_CACHE]}}


def parsed(manifest: JSON) -> PyTorchJob:
    return default_job(PyTorchJob.model_validate(manifest))


def with_affinity(manifest: JSON, affinity: JSON | None) -> JSON:
    """The manifest with `affinity` in every replica's template."""
    if affinity is not None:
        for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
            spec["template"] = {**spec["template"], "spec": {**spec["template"]["spec"]}}
            spec["template"]["spec"]["affinity"] = copy.deepcopy(affinity)
    return manifest


def elastic_job(affinity: JSON | None = None, **kwargs: Any) -> JSON:
    return with_affinity(job(elastic=ELASTIC, **kwargs), affinity)


@pytest.mark.parametrize(
    ("own", "expected"),
    [
        pytest.param(None, {"podAffinity": {PREFERRED: [PACK]}}, id="none declared"),
        pytest.param({}, {"podAffinity": {PREFERRED: [PACK]}}, id="empty"),
        pytest.param(NODE, {**NODE, "podAffinity": {PREFERRED: [PACK]}}, id="node affinity kept"),
        pytest.param(
            APART, {**APART, "podAffinity": {PREFERRED: [PACK]}}, id="pod anti-affinity kept"
        ),
        pytest.param(
            {"podAffinity": {PREFERRED: [NEAR_CACHE]}},
            {"podAffinity": {PREFERRED: [NEAR_CACHE, PACK]}},
            id="own preferred terms first, ours beside them",
        ),
        pytest.param(
            {"podAffinity": {REQUIRED: [CACHE]}},
            {"podAffinity": {REQUIRED: [CACHE], PREFERRED: [PACK]}},
            id="own required terms kept",
        ),
        pytest.param(
            {"podAffinity": {PREFERRED: [PACK, NEAR_CACHE]}},
            {"podAffinity": {PREFERRED: [PACK, NEAR_CACHE]}},
            id="the same term declared: not added twice",
        ),
    ],
)
def test_the_packing_term_joins_the_templates_affinity(own: JSON | None, expected: JSON) -> None:
    before = copy.deepcopy(own)
    assert packed_with_workers(parsed(elastic_job()), own=own) == expected
    assert own == before  # the template is not changed in place


def test_the_selector_names_the_jobs_workers_as_its_pods_are_labelled() -> None:
    manifest = elastic_job()
    manifest["metadata"]["name"] = "a/b"
    term = packed_with_workers(parsed(manifest), own=None)["podAffinity"][PREFERRED][0]
    built = desired_pod(parsed(manifest), replica_type="Worker", index=1)
    labels = built["metadata"]["labels"]
    selected = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selected.items() <= labels.items()
    assert selected["training.kubeflow.org/job-name"] == "a-b"


def affinity_of(manifest: JSON, replica_type: str = "Worker", index: int = 0) -> JSON | None:
    built = desired_pod(parsed(manifest), replica_type=replica_type, index=index)
    affinity: JSON | None = built["spec"].get("affinity")
    return affinity


@pytest.mark.parametrize(
    ("manifest", "replica_type", "expected"),
    [
        pytest.param(elastic_job(), "Worker", {"podAffinity": {PREFERRED: [PACK]}}, id="elastic worker"),
        pytest.param(elastic_job(NODE), "Worker", {**NODE, "podAffinity": {PREFERRED: [PACK]}}, id="elastic worker, own affinity"),
        pytest.param(elastic_job(master=True), "Master", None, id="elastic job's master: as upstream"),
        pytest.param(elastic_job(NODE, master=True), "Master", NODE, id="elastic job's master keeps its own"),
        pytest.param(job(), "Worker", None, id="non-elastic worker: as upstream"),
        pytest.param(with_affinity(job(), NODE), "Worker", NODE, id="non-elastic worker keeps its own"),
        pytest.param(job(master=True), "Master", None, id="non-elastic master: as upstream"),
    ],
)  # fmt: skip
def test_only_an_elastic_jobs_workers_are_packed(
    manifest: JSON, replica_type: str, expected: JSON | None
) -> None:
    assert affinity_of(manifest, replica_type) == expected


def test_every_worker_index_carries_the_same_term() -> None:
    manifest = elastic_job()
    assert affinity_of(manifest, index=0) == affinity_of(manifest, index=3)


def test_a_torchft_worker_is_packed_and_its_lighthouse_is_not() -> None:
    manifest = elastic_job(NODE)
    manifest["metadata"]["annotations"] = {ft.ANNOTATION: ft.TORCHFT}
    assert affinity_of(manifest) == {**NODE, "podAffinity": {PREFERRED: [PACK]}}
    assert desired_lighthouse_pod(parsed(manifest))["spec"]["affinity"] == NODE


def test_the_rendezvous_store_keeps_spreading_from_the_workers() -> None:
    manifest = elastic_job(NODE)
    manifest["metadata"]["annotations"] = {rendezvous.ANNOTATION: rendezvous.STORE}
    affinity = desired_store_pod(parsed(manifest))["spec"]["affinity"]
    assert "podAffinity" not in affinity
    assert affinity["nodeAffinity"] == NODE["nodeAffinity"]
    assert affinity["podAntiAffinity"][PREFERRED][0]["podAffinityTerm"] == PACK["podAffinityTerm"]
