"""Upstream defaulting (upstream v1.9's `pytorch_defaults.go` and its test), as tables.

Every case of upstream's `pkg/apis/kubeflow.org/v1/pytorch_defaults_test.go` is here, its id
naming it (`pytorch_defaults_test.go: ...`); the other ids are this project's own cases.
Upstream's `TestSetElasticPolicy` lists "minReplicas and maxReplicas to 1" twice, with the same
inputs: it is ported once.
"""

from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.api.defaults import (
    camel_case_replica_type,
    default_elastic_policy,
    default_template_port,
)
from autoscaler.api.models import ElasticPolicy

DEFAULTS_TEST = "pytorch_defaults_test.go"


def job(**spec: Any) -> PyTorchJob:
    base: dict[str, Any] = {
        "pytorchReplicaSpecs": {
            "Worker": {"template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}}}
        }
    }
    return PyTorchJob.model_validate({"metadata": {"name": "j"}, "spec": {**base, **spec}})


@pytest.mark.parametrize(
    ("policy", "worker_replicas", "expected"),
    [
        pytest.param({}, 1, (1, 1), id=f"{DEFAULTS_TEST}: minReplicas and maxReplicas to null"),
        pytest.param({}, 4, (4, 4), id="both unset, 4 workers: the Worker replicas"),
        pytest.param(
            {"minReplicas": 1, "maxReplicas": 1},
            1,
            (1, 1),
            id=f"{DEFAULTS_TEST}: minReplicas and maxReplicas to 1",
        ),
        pytest.param(
            {"maxReplicas": 1},
            1,
            (1, 1),
            id=f"{DEFAULTS_TEST}: minReplicas to null, maxRepliacs to 1",
        ),
        pytest.param(
            {"minReplicas": 1},
            1,
            (1, 1),
            id=f"{DEFAULTS_TEST}: maxRepliacs to null, minReplicas to 1",
        ),
        pytest.param({"maxReplicas": 5}, 2, (5, 5), id="only max: min = max"),
        pytest.param({"minReplicas": 2, "maxReplicas": 6}, 3, (2, 6), id="both set: kept"),
    ],
)
def test_elastic_bounds(
    policy: dict[str, int], worker_replicas: int, expected: tuple[int, int]
) -> None:
    out = default_elastic_policy(
        ElasticPolicy.model_validate(policy), worker_replicas=worker_replicas
    )
    assert (out.min_replicas, out.max_replicas) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"elasticPolicy": {}},
            "auto",
            id=f"{DEFAULTS_TEST}: test default nproc per node (elastic, nProcPerNode nil)",
        ),
        pytest.param(
            {}, "auto", id=f"{DEFAULTS_TEST}: test default nproc per node (elasticPolicy nil)"
        ),
        pytest.param({"nprocPerNode": "4"}, "4", id="set: kept"),
        pytest.param(
            {"elasticPolicy": {"nProcPerNode": 2}}, None, id="deprecated field set: no default"
        ),
    ],
)
def test_nproc_per_node(spec: dict[str, Any], expected: str | None) -> None:
    assert default_job(job(**spec)).spec.nproc_per_node == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("worker", "Worker"), ("WORKER", "Worker"), ("MASTER", "Master"), ("Chief", "Chief")],
)
def test_replica_type_camel_case(name: str, expected: str) -> None:
    assert camel_case_replica_type(name) == expected


def test_replica_spec_defaults_and_input_untouched() -> None:
    original = job(elasticPolicy={"maxReplicas": 3})
    before = original.to_json()
    out = default_job(original)
    worker = out.spec.pytorch_replica_specs["Worker"]
    assert (worker.replicas, worker.restart_policy) == (1, "OnFailure")
    assert out.spec.run_policy.clean_pod_policy == "None"
    assert (out.spec.elastic_policy.min_replicas, out.spec.elastic_policy.max_replicas) == (3, 3)  # type: ignore[union-attr]
    assert original.to_json() == before


@pytest.mark.parametrize(
    ("containers", "expected_ports"),
    [
        # The pytorch container gets the default port...
        ([{"name": "pytorch"}], [[{"name": "pytorchjob-port", "containerPort": 23456}]]),
        # ...not a sidecar listed before it...
        (
            [{"name": "side"}, {"name": "pytorch"}],
            [None, [{"name": "pytorchjob-port", "containerPort": 23456}]],
        ),
        # ...the first container when none is named pytorch...
        (
            [{"name": "a"}, {"name": "b"}],
            [[{"name": "pytorchjob-port", "containerPort": 23456}], None],
        ),
        # ...and an existing pytorchjob-port is kept as the user wrote it.
        (
            [{"name": "pytorch", "ports": [{"name": "pytorchjob-port", "containerPort": 8080}]}],
            [[{"name": "pytorchjob-port", "containerPort": 8080}]],
        ),
    ],
)
def test_default_port(containers: list[dict[str, Any]], expected_ports: list[Any]) -> None:
    out = default_template_port({"spec": {"containers": containers}})
    assert [cont.get("ports") for cont in out["spec"]["containers"]] == expected_ports
