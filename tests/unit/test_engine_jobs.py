"""The engine's reading of a PyTorchJob: what it may and may not do with it."""

from typing import Any

import pytest

from autoscaler.engine.jobs import managed_job
from autoscaler.engine.ports import ManagedJob


def job(**policy: Any) -> ManagedJob:
    found = managed_job(
        {
            "metadata": {
                "name": "j",
                "namespace": "n",
                "creationTimestamp": "2026-11-30T00:00:00Z",
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
