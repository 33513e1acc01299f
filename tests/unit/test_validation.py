"""The offline validator gives the API server's field and message for every invalid case.

`tests/integration/test_crd.py` runs the same table against the real kube-apiserver.
"""

import copy

import pytest

from autoscaler.api.validation import validate
from tests.support.jobs import (
    INVALID,
    INVALID_UPDATES,
    TORCHRUN_NPROC_FORMS,
    UPSTREAM_JOBS,
    VALID,
    Invalid,
    InvalidUpdate,
    Valid,
    echo_with_nproc,
    queued_echo,
    upstream_job,
)


@pytest.mark.parametrize("name", UPSTREAM_JOBS)
def test_upstream_examples_are_valid(name: str) -> None:
    assert validate(upstream_job(name)) == []


@pytest.mark.parametrize("value", TORCHRUN_NPROC_FORMS)
def test_every_nproc_form_torchrun_accepts_is_valid(value: str) -> None:
    assert validate(echo_with_nproc(value)) == []


@pytest.mark.parametrize("case", VALID, ids=lambda case: case.id)
def test_valid_job(case: Valid) -> None:
    assert validate(case.job) == []


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_invalid_job(case: Invalid) -> None:
    errors = [(error.field, error.message) for error in validate(case.job)]
    assert (case.field, case.message) in errors


@pytest.mark.parametrize("case", INVALID_UPDATES, ids=lambda case: case.id)
def test_invalid_update(case: InvalidUpdate) -> None:
    old = queued_echo()
    new = copy.deepcopy(old)
    case.edit(new)
    assert validate(new) == []  # fine as a new object...
    assert [(e.field, e.message) for e in validate(new, old=old)] == [
        (case.field, case.message)
    ]  # ...not as a change


def test_null_fields_are_pruned_not_rejected() -> None:
    job = upstream_job("echo.yaml")
    job["metadata"]["creationTimestamp"] = None
    job["spec"]["runPolicy"] = None
    assert validate(job) == []


def test_unknown_field_is_reported_with_its_path() -> None:
    job = upstream_job("echo.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagee"] = (
        "x"
    )
    field = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imagee"
    assert [str(e) for e in validate(job)] == [f'{field}: unknown field "{field}"']
