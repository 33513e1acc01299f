"""The operator's job annotations, declared once: each read, defaulted and reported by its mode."""

from typing import Any

import pytest

from autoscaler import fault_tolerance as ft
from autoscaler.api import PyTorchJob, default_job
from autoscaler.api import coordinates as c
from autoscaler.api.operator_annotations import (
    FAULT_TOLERANCE,
    RENDEZVOUS,
    Mode,
    OperatorAnnotations,
    read_operator_annotations,
    setting,
)
from autoscaler.cli.reference import annotations
from autoscaler.controller import conditions as cond
from autoscaler.controller import rendezvous, torchft
from tests.unit.test_torchft_mode import ft_job

HEARTBEAT, JOIN, TICK = (
    ft.ANNOTATION_HEARTBEAT_TIMEOUT,
    ft.ANNOTATION_JOIN_TIMEOUT,
    ft.ANNOTATION_QUORUM_TICK,
)

# (annotation, text, field, value read, the problem reported word for word, or None).
CASES: list[tuple[str, str, str, Any, str | None]] = [
    (ft.ANNOTATION, "torchft", "fault_tolerance", "torchft", None),
    (ft.ANNOTATION, "yes", "fault_tolerance", None,
     f'{ft.ANNOTATION} must be "torchft", not "yes"'),
    (ft.ANNOTATION, "TorchFT", "fault_tolerance", None,
     f'{ft.ANNOTATION} must be "torchft", not "TorchFT"'),
    (HEARTBEAT, "3000", "heartbeat_timeout_ms", 3000, None),
    (HEARTBEAT, "0", "heartbeat_timeout_ms", ft.DEFAULT_HEARTBEAT_TIMEOUT_MS,
     f'{HEARTBEAT} must be a positive number of milliseconds, not "0"'),
    (JOIN, "250", "join_timeout_ms", 250, None),
    (JOIN, "-5", "join_timeout_ms", ft.DEFAULT_JOIN_TIMEOUT_MS,
     f'{JOIN} must be a positive number of milliseconds, not "-5"'),
    (JOIN, "1.5", "join_timeout_ms", ft.DEFAULT_JOIN_TIMEOUT_MS,
     f'{JOIN} must be a positive number of milliseconds, not "1.5"'),
    (TICK, "50", "quorum_tick_ms", 50, None),
    (TICK, "²", "quorum_tick_ms", ft.DEFAULT_QUORUM_TICK_MS,
     f'{TICK} must be a positive number of milliseconds, not "²"'),
    (c.ANNOTATION_RENDEZVOUS, "store", "rendezvous", "store", None),
    (c.ANNOTATION_RENDEZVOUS, "worker-0", "rendezvous", None,
     f'{c.ANNOTATION_RENDEZVOUS} must be "store", not "worker-0"'),
]  # fmt: skip


@pytest.mark.parametrize(("key", "text", "field", "value", "reported"), CASES)
def test_each_annotation_is_read_or_refused_with_its_reason(
    key: str, text: str, field: str, value: Any, reported: str | None
) -> None:
    found, invalid = read_operator_annotations({key: text})
    assert getattr(found, field) == value
    assert [i.message for i in invalid] == ([reported] if reported else [])
    assert all((i.key, i.mode) == (key, setting(field).mode) for i in invalid)
    others = found.model_dump(exclude={field})
    assert others == OperatorAnnotations().model_dump(exclude={field})


def test_absent_annotations_are_the_defaults() -> None:
    found, invalid = read_operator_annotations({"unrelated": "x"})
    assert (found, invalid) == (OperatorAnnotations(), [])
    assert found.model_dump() == {
        "fault_tolerance": None,
        "heartbeat_timeout_ms": ft.DEFAULT_HEARTBEAT_TIMEOUT_MS,
        "join_timeout_ms": ft.DEFAULT_JOIN_TIMEOUT_MS,
        "quorum_tick_ms": ft.DEFAULT_QUORUM_TICK_MS,
        "rendezvous": None,
    }


def test_every_annotation_is_declared_with_its_key_meaning_and_mode() -> None:
    keys = [field.alias for field in OperatorAnnotations.model_fields.values()]
    assert keys == [ft.ANNOTATION, HEARTBEAT, JOIN, TICK, c.ANNOTATION_RENDEZVOUS]
    assert keys[-1] == rendezvous.ANNOTATION
    for name, field in OperatorAnnotations.model_fields.items():
        assert field.description, name
        assert setting(name).value, name
        assert setting(name).mode in {FAULT_TOLERANCE, RENDEZVOUS}, name
    assert {key for key, *_ in CASES} == set(keys), "every annotation has a row in CASES"


@pytest.mark.parametrize(
    ("mode", "condition"),
    [(FAULT_TOLERANCE, cond.FAULT_TOLERANCE), (RENDEZVOUS, cond.RENDEZVOUS)],
)
def test_the_controllers_conditions_are_the_modes(mode: Mode, condition: str) -> None:
    assert mode.condition == condition


def test_the_reference_has_a_row_per_operator_annotation_after_the_engines() -> None:
    text = annotations()
    operator = text[text.index("## Read by the operator") :]
    rows = [line for line in operator.splitlines() if line.startswith("| [")]
    keys = [field.alias for field in OperatorAnnotations.model_fields.values()]
    assert [row.split("`")[1] for row in rows] == keys
    assert all(row.count(" | ") == 5 for row in rows)  # six cells, no stray `|` in a value
    assert all(f"`{setting(name).mode.reason}`" in row for name, row in zip(
        OperatorAnnotations.model_fields, rows, strict=True
    ))  # fmt: skip


@pytest.mark.parametrize(
    ("annotations", "master", "first"),
    [
        ({ft.ANNOTATION: "yes", HEARTBEAT: "0"}, True, 'must be "torchft", not "yes"'),
        ({ft.ANNOTATION: ft.TORCHFT, HEARTBEAT: "0"}, True, "needs a job without a Master"),
        ({ft.ANNOTATION: ft.TORCHFT, JOIN: "x", TICK: "0"}, False, f"{JOIN} must be a positive"),
        ({HEARTBEAT: "0"}, False, None),  # no torchft mode: its timeouts are never read
    ],
)
def test_torchft_reports_its_annotation_then_the_spec_then_the_timeouts(
    annotations: dict[str, str], master: bool, first: str | None
) -> None:
    manifest = ft_job(annotations=annotations, master=master)
    problem = torchft.problem(default_job(PyTorchJob.model_validate(manifest)))
    assert problem == first if first is None else first in (problem or "")


def test_the_lighthouse_runs_with_the_timeouts_read() -> None:
    annotations = {ft.ANNOTATION: ft.TORCHFT, JOIN: "250", TICK: "50"}
    args = torchft.lighthouse_args(
        default_job(PyTorchJob.model_validate(ft_job(annotations=annotations)))
    )
    assert args[-3:] == [
        f"--heartbeat_timeout_ms={ft.DEFAULT_HEARTBEAT_TIMEOUT_MS}",
        "--join_timeout_ms=250",
        "--quorum_tick_ms=50",
    ]
