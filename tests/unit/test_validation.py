"""The offline validator gives the API server's field and message for every invalid case.

`tests/integration/test_crd.py` runs the same table against the real kube-apiserver.
"""

import copy
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.api.rules import NPROC_PER_NODE
from autoscaler.api.validation import validate
from tests.support.jobs import (
    INVALID,
    INVALID_UPDATES,
    NOT_TORCHRUN_NPROC_FORMS,
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


@pytest.mark.parametrize("value", NOT_TORCHRUN_NPROC_FORMS)
def test_a_near_miss_of_the_nproc_forms_is_invalid(value: str) -> None:
    assert [error.field for error in validate(echo_with_nproc(value))] == ["spec.nprocPerNode"]


def torchrun_reads(value: str) -> bool:
    """Whether torch 2.15's `determine_local_world_size` takes `value` as a count or a name:
    int() (a positive count), else a lowercase name (checked against the node at start)."""
    try:
        return int(value) > 0
    except ValueError:
        return re.fullmatch("[a-z][a-z0-9_]*", value) is not None


NEAR_NUMBERS = st.text(alphabet="0123456789_+- \t\n\v\f\r\x1cxa", max_size=8)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.one_of(NEAR_NUMBERS, st.text(alphabet=st.characters(max_codepoint=127), max_size=8)))
def test_the_nproc_rule_takes_exactly_the_ascii_forms_torchrun_reads(value: str) -> None:
    """The rule's one pattern (the CRD's CEL rule and `validate`'s twin; the tables above and
    `tests/integration/test_crd.py` hold them to it) against int() itself."""
    assert (re.fullmatch(NPROC_PER_NODE, value) is not None) is torchrun_reads(value)


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


def fields_of(job: dict[str, object]) -> list[str]:
    return [error.field for error in validate(job)]


# The API server's order, as `make fuzz` measured it against kube-apiserver 1.36.3.
ORDER_CASES = [
    pytest.param(
        lambda j: (
            j["spec"]["elasticPolicy"].update(minReplica=1),
            j["spec"]["elasticPolicy"].update(rdzvPort=0),
        ),
        ["spec.elasticPolicy.minReplica"],
        id="an-unknown-field-alone-refuses",
    ),
    pytest.param(
        lambda j: j["metadata"].update(labelz={}),
        ["metadata.labelz"],
        id="objectmeta-unknown-field",
    ),
    pytest.param(
        lambda j: (
            j["spec"]["elasticPolicy"].update(rdzvBackend="zookeeper"),
            j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=5),
        ),
        ["spec.elasticPolicy.rdzvBackend", "<nil>"],
        id="a-blocking-error-skips-the-cel-rules",
    ),
    pytest.param(
        lambda j: (
            j["spec"]["elasticPolicy"].update(rdzvPort=0),
            j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=5),
        ),
        ["spec.elasticPolicy.rdzvPort", "spec.pytorchReplicaSpecs[Worker].replicas"],
        id="a-bound-error-lets-the-cel-rules-run",
    ),
    pytest.param(
        lambda j: j["metadata"].pop("name"),
        ["metadata.name", "<nil>"],
        id="a-name-is-required",
    ),
    pytest.param(
        lambda j: j["metadata"].update(name="echo.v2"),
        ["metadata.name"],  # a DNS-1123 subdomain, but no DNS-1035 label
        id="name-subdomain-not-label",
    ),
    pytest.param(
        lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=2**31),
        [
            "<nil>",
            ".spec.pytorchReplicaSpecs.Worker.replicas",
            "spec.pytorchReplicaSpecs[Worker].replicas",
        ],
        id="int32-overflow-format-scale-and-bounds",
    ),
]


@pytest.mark.parametrize(("edit", "fields"), ORDER_CASES)
def test_errors_come_in_the_api_servers_order(edit: object, fields: list[str]) -> None:
    job = upstream_job("echo.yaml")
    edit(job)  # type: ignore[operator]
    assert fields_of(job) == fields
