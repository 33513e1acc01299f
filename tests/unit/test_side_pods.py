"""The pods the operator runs beside a job's workers (torchft's lighthouse, the rendezvous store):
replaced rather than restarted, owned by the job, and ended quickly whatever grace the workers'
template gives its own pods."""

from collections.abc import Callable
from typing import Any

import pytest

from autoscaler import fault_tolerance as ft
from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller import rendezvous
from autoscaler.controller.rendezvous import desired_store_pod
from autoscaler.controller.torchft import desired_lighthouse_pod
from tests.unit.test_reconcile import job

JSON = dict[str, Any]
SIDE_PODS = [
    pytest.param(ft.ANNOTATION, ft.TORCHFT, desired_lighthouse_pod, id="lighthouse"),
    pytest.param(rendezvous.ANNOTATION, rendezvous.STORE, desired_store_pod, id="rendezvous store"),
]


def side_pod_of(annotation: str, value: str, build: Callable[[PyTorchJob], JSON]) -> JSON:
    manifest = job(elastic={"minReplicas": 1, "maxReplicas": 4})
    manifest["metadata"]["annotations"] = {annotation: value}
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["terminationGracePeriodSeconds"] = 600  # time for the workers' own checkpoint
    return build(default_job(PyTorchJob.model_validate(manifest)))


@pytest.mark.parametrize(("annotation", "value", "build"), SIDE_PODS)
def test_a_side_pod_ends_within_a_second_whatever_the_workers_grace(
    annotation: str, value: str, build: Callable[[PyTorchJob], JSON]
) -> None:
    spec = side_pod_of(annotation, value, build)["spec"]
    assert spec["terminationGracePeriodSeconds"] == 1  # as PID 1 it ignores SIGTERM
    assert spec["restartPolicy"] == "Never"
