"""The engine's reading of a PyTorchJob: what it may and may not do with it."""

from typing import Any

import pytest

from autoscaler.api import coordinates as c
from autoscaler.api.defaults import default_job
from autoscaler.api.models import PyTorchJob
from autoscaler.api.ownership import Owner
from autoscaler.clients.jobs import managed_job
from autoscaler.engine.ports import ManagedJob
from autoscaler.fault_tolerance import ANNOTATION, RESIZE_PAUSE_SECONDS, TORCHFT


def job(
    labels: dict[str, str] | None = None, *, metadata: dict[str, Any] | None = None, **policy: Any
) -> ManagedJob:
    found = managed_job(
        {
            "metadata": {
                "name": "j",
                "namespace": "n",
                "creationTimestamp": "2026-11-30T00:00:00Z",
                "labels": labels or {},
                **(metadata or {}),
            },
            "spec": {
                "elasticPolicy": {"minReplicas": 1, "maxReplicas": 4, **policy},
                "pytorchReplicaSpecs": {"Worker": {"replicas": 2}},
            },
        }
    )
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("policy", "budget"),
    [
        ({}, 0),  # torchrun's --max-restarts default: a rescale's worker failure ends the agent
        ({"maxRestarts": 0}, 0),
        ({"maxRestarts": 7}, 7),
    ],
)
def test_the_restart_budget_is_torchruns(policy: dict[str, Any], budget: int) -> None:
    assert job(**policy).max_restarts == budget


def test_a_torchft_job_pauses_for_its_own_measured_time_and_has_no_torchrun_budget() -> None:
    torchft = job(metadata={"annotations": {ANNOTATION: TORCHFT}}, maxRestarts=3)
    assert (torchft.restart_seconds, torchft.max_restarts) == (RESIZE_PAUSE_SECONDS, None)
    torchrun = job(maxRestarts=3)
    assert (torchrun.restart_seconds, torchrun.max_restarts) == (None, 3)


@pytest.mark.parametrize(
    "policy",
    [{}, {"minReplicas": 3}, {"maxReplicas": 5}, {"minReplicas": 2, "maxReplicas": 6}],
    ids=["none", "min-only", "max-only", "both"],
)
def test_the_engine_reads_the_bounds_the_operator_defaults(policy: dict[str, int]) -> None:
    obj = {
        "metadata": {"name": "j", "namespace": "n", "creationTimestamp": "2026-11-30T00:00:00Z"},
        "spec": {"elasticPolicy": policy, "pytorchReplicaSpecs": {"Worker": {"replicas": 4}}},
    }
    operator = default_job(PyTorchJob.model_validate(obj)).spec.elastic_policy
    engine = managed_job(obj)
    assert operator is not None
    assert engine is not None
    assert (engine.min_replicas, engine.max_replicas) == (
        operator.min_replicas,
        operator.max_replicas,
    )


METRICS = [{"type": "Resource", "resource": {"name": "cpu"}}]


@pytest.mark.parametrize(
    ("labels", "policy", "owner"),
    [
        ({}, {}, Owner.ENGINE),
        ({}, {"metrics": METRICS}, Owner.HPA),
        ({c.LABEL_KUEUE_QUEUE_NAME: "team-a"}, {}, Owner.KUEUE),
        # Kueue requeues the job after any resize, the HPA's too: the queue label wins.
        ({c.LABEL_KUEUE_QUEUE_NAME: "team-a"}, {"metrics": METRICS}, Owner.KUEUE),
        ({c.LABEL_KUEUE_QUEUE_NAME: ""}, {}, Owner.ENGINE),  # Kueue ignores an empty queue name
    ],
)
def test_one_owner_per_job(labels: dict[str, str], policy: dict[str, Any], owner: Owner) -> None:
    assert job(labels, **policy).owner is owner


@pytest.mark.parametrize(("value", "owner"), [("true", Owner.ENGINE), ("false", Owner.KUEUE)])
def test_a_queued_job_in_kueues_workload_slices_is_the_engines(value: str, owner: Owner) -> None:
    metadata = {"annotations": {c.ANNOTATION_KUEUE_ELASTIC: value}}
    assert job({c.LABEL_KUEUE_QUEUE_NAME: "team-a"}, metadata=metadata).owner is owner


@pytest.mark.parametrize(
    ("metadata", "version"),
    [
        ({"resourceVersion": "4711"}, "4711"),  # as the informer read it: the /scale precondition
        ({}, ""),  # none known: the write reads /scale first
    ],
    ids=["read", "missing"],
)
def test_the_engine_keeps_the_version_it_read_the_job_at(
    metadata: dict[str, str], version: str
) -> None:
    assert job(metadata=metadata).resource_version == version
