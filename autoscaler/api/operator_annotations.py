"""The operator's job annotations, declared once: each field of `OperatorAnnotations` is one
annotation (its key is the field's alias) with its type, its default (the annotation absent), its
meaning and a `Setting` saying how its text is read and which `Mode` reports an unusable one.

A mode is something the operator runs beside a job's workers on request (torchft's lighthouse,
the rendezvous store). While one of its annotations is invalid, or the job is one the mode cannot
run, the mode's condition is False with its reason, a Warning Event of that reason says why, and
no pods are created; the controller adds the checks of the job's spec (`problem` in
`autoscaler.controller.torchft` and `autoscaler.controller.rendezvous`). The worker pods' own
marker, the lighthouse uid, is not a job annotation and is not declared here.
`autoscaler.cli.reference` generates the operator's part of docs/annotations.md from it.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from autoscaler import fault_tolerance as ft
from autoscaler.api import coordinates as c
from autoscaler.api.annotations import AnnotationError


@dataclass(frozen=True)
class Mode:
    """What the operator runs for a job that asks, and how it reports a request it cannot run:
    its side condition `condition` False with `reason`, and a Warning Event `reason`."""

    name: str
    page: str  # the docs page that explains it
    condition: str
    reason: str


FAULT_TOLERANCE: Final = Mode(
    "torchft", page="torchft.md", condition="FaultTolerance", reason="InvalidFaultTolerance"
)
RENDEZVOUS: Final = Mode(
    "rendezvous store", page="pytorchjob.md", condition="Rendezvous", reason="InvalidRendezvous"
)


@dataclass(frozen=True)
class Setting:
    """How one operator annotation's text is read: `parse` returns the value or raises
    `AnnotationError` (its message is the report), and `mode` reports it. `value` is what the
    reference says of it."""

    parse: Callable[[str], Any]
    value: str
    mode: Mode


@dataclass(frozen=True)
class Invalid:
    """Why an operator annotation cannot be run, and the mode that reports it."""

    key: str
    message: str
    mode: Mode


def _exactly(key: str, allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text != allowed:
            raise AnnotationError(f'{key} must be "{allowed}", not "{text}"')
        return text

    return parse


def _milliseconds(key: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        # isdecimal: every text int() reads without a sign, space or underscore
        if not (text.isdecimal() and int(text) > 0):
            raise AnnotationError(f'{key} must be a positive number of milliseconds, not "{text}"')
        return int(text)

    return parse


def _lighthouse_timeout(key: str) -> Setting:
    """torchft mode's lighthouse timeouts are read alike."""
    return Setting(_milliseconds(key), value="a positive whole number", mode=FAULT_TOLERANCE)


class OperatorAnnotations(BaseModel):
    """Every annotation the operator reads on a job, as `read_operator_annotations` reads them:
    the defaults are a job without any."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    fault_tolerance: Annotated[
        Literal["torchft"] | None,
        Field(
            alias=ft.ANNOTATION,
            description="the job runs under torchft: a lighthouse Pod beside it, each Worker one"
            " replica group, and no survivor restarts when a group leaves or joins, which the"
            " engine prices as a short pause (none: torchrun's elastic agents); an elastic job"
            " without a Master, one process per pod",
        ),
        Setting(
            _exactly(ft.ANNOTATION, ft.TORCHFT), value=f'`"{ft.TORCHFT}"`', mode=FAULT_TOLERANCE
        ),
    ] = None
    heartbeat_timeout_ms: Annotated[
        int,
        Field(
            alias=ft.ANNOTATION_HEARTBEAT_TIMEOUT,
            description="a replica group not heard from for this long"
            " (milliseconds) is dropped, what the survivors wait when another group leaves",
        ),
        _lighthouse_timeout(ft.ANNOTATION_HEARTBEAT_TIMEOUT),
    ] = ft.DEFAULT_HEARTBEAT_TIMEOUT_MS
    join_timeout_ms: Annotated[
        int,
        Field(
            alias=ft.ANNOTATION_JOIN_TIMEOUT,
            description="how long (milliseconds) a quorum that lost a member waits for the rest",
        ),
        _lighthouse_timeout(ft.ANNOTATION_JOIN_TIMEOUT),
    ] = ft.DEFAULT_JOIN_TIMEOUT_MS
    quorum_tick_ms: Annotated[
        int,
        Field(
            alias=ft.ANNOTATION_QUORUM_TICK,
            description="how often (milliseconds) the lighthouse re-evaluates a quorum",
        ),
        _lighthouse_timeout(ft.ANNOTATION_QUORUM_TICK),
    ] = ft.DEFAULT_QUORUM_TICK_MS
    rendezvous: Annotated[
        Literal["store"] | None,
        Field(
            alias=c.ANNOTATION_RENDEZVOUS,
            description="the job's torchrun rendezvous lives in a store Pod beside it, not in"
            " worker-0, so a lost worker-0 costs the survivors one re-form (none: in worker-0);"
            " an elastic job without a Master, on the c10d backend, with neither rdzvHost nor"
            " rdzvPort, not in torchft mode",
        ),
        Setting(
            _exactly(c.ANNOTATION_RENDEZVOUS, c.RENDEZVOUS_STORE),
            value=f'`"{c.RENDEZVOUS_STORE}"`',
            mode=RENDEZVOUS,
        ),
    ] = None


def setting(field: str) -> Setting:
    """The `Setting` a field of `OperatorAnnotations` is declared with."""
    metadata = OperatorAnnotations.model_fields[field].metadata
    return next(m for m in metadata if isinstance(m, Setting))


def read_operator_annotations(
    annotations: Mapping[str, str],
) -> tuple[OperatorAnnotations, list[Invalid]]:
    """The job's annotations as the operator reads them (an invalid one: its default), and why
    any cannot be run, in declaration order."""
    values: dict[str, Any] = {}
    problems: list[Invalid] = []
    for name, field in OperatorAnnotations.model_fields.items():
        key, how = str(field.alias), setting(name)
        text = annotations.get(key)
        if text is None:
            continue
        try:
            values[name] = how.parse(text)
        except AnnotationError as invalid:
            problems.append(Invalid(key=key, message=str(invalid), mode=how.mode))
    return OperatorAnnotations.model_validate(values), problems
