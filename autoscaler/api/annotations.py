"""The policy engine's job annotations, declared once: each field of `JobAnnotations` is one
annotation (its key is the field's alias) with its type, its default (the annotation absent), its
meaning and a `Reader` saying how its text is read and what an unusable text does.

`read_annotations` reads every annotation the same way: a text its parser refuses
(`AnnotationError`) is ignored, the field takes its fallback, and the reason is returned as a
`Problem`: a Warning Event `InvalidAnnotation` (and a line of `autoscaler validate`) or, for what
the engine writes itself or never warned about, its log only. `autoscaler.cli.reference`
generates docs/annotations.md from it.
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.api import coordinates as c
from autoscaler.api.timestamps import parse_timestamp

# An unreadable held-since marker is the engine's anyway: dated here, its starvation bound is due.
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class AnnotationError(ValueError):
    """An annotation's text the engine cannot use; the message is the whole report."""


class Report(StrEnum):
    """Where an unusable annotation is reported."""

    WARNING = "Warning Event `InvalidAnnotation`"  # the user's annotations: they can fix them
    LOG = "logged"  # the engine's own, and the weight, which never warned


@dataclass(frozen=True)
class Bounds:
    """The job's worker bounds, which some annotations are read within."""

    low: int
    high: int


_DEFAULT: Final[Any] = object()  # Reader.fallback: the field's default


@dataclass(frozen=True)
class Reader:
    """How one annotation's text is read: `parse` returns the value or raises `AnnotationError`;
    then the field is `fallback` (its default unless given) and the message is reported as
    `report` says. `report` None: every text is read (nothing is invalid here; `judged` says
    where it is judged instead). `value` and `written_by` are what the reference says of it."""

    parse: Callable[[str, Bounds], Any]
    value: str
    report: Report | None = Report.WARNING
    fallback: Any = _DEFAULT
    written_by: Literal["user", "engine"] = "user"
    judged: str = ""

    def fallback_for(self, default: Any) -> Any:
        """The field's value when its text is refused."""
        return default if self.fallback is _DEFAULT else self.fallback


@dataclass(frozen=True)
class Problem:
    """Why an annotation is ignored, and where it is reported."""

    key: str
    message: str
    report: Report


def ignored(key: str, text: str, why: str) -> AnnotationError:
    """The usual report: the annotation, its text, why it is ignored."""
    return AnnotationError(f"{key} {text!r} {why}: ignored")


def _as_written(text: str, bounds: Bounds) -> str:
    return text


def _opt_out(text: str, bounds: Bounds) -> bool:
    return text.lower() == "true"


def opted_out(annotations: Mapping[str, str]) -> bool:
    """Whether a job opted out of the engine, read as `JobAnnotations.opt_out` reads it."""
    return _opt_out(annotations.get(c.ANNOTATION_OPT_OUT, ""), Bounds(low=1, high=1))


def _weight(text: str, bounds: Bounds) -> float:
    try:
        weight = float(text)
    except ValueError:
        raise AnnotationError(f"ignoring weight annotation {text!r}: not a number") from None
    return weight if weight > 0 else 1.0


def _number(text: str) -> float:
    """The number, NaN when the text is none (the caller reports it)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _total_samples(text: str, bounds: Bounds) -> float:
    value = _number(text)
    if not math.isfinite(value) or value <= 0:
        raise ignored(c.ANNOTATION_TOTAL_SAMPLES, text, "is not a positive number")
    return value


def _allowed_replicas(text: str, bounds: Bounds) -> tuple[int, ...]:
    """Every count a whole number in the job's bounds."""
    name, low, high = c.ANNOTATION_ALLOWED_REPLICAS, bounds.low, bounds.high
    if text.strip() == "powers-of-two":
        counts = [2**k for k in range(high.bit_length()) if low <= 2**k <= high]
        if not counts:
            raise AnnotationError(f"{name}: no power of two lies in [{low}, {high}]: ignored")
        return tuple(counts)
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise ignored(name, text, "is neither a comma-separated list of counts nor powers-of-two")
    counts = sorted({int(part) for part in parts})
    outside = [n for n in counts if not low <= n <= high]
    if outside:
        raise AnnotationError(
            f"{name} {text!r}: {outside} outside the job's [{low}, {high}]: ignored"
        )
    return tuple(counts)


def _throughput_profile(text: str, bounds: Bounds) -> dict[int, float]:
    """`count:samples/s` pairs, each count once, in the job's bounds, each rate positive."""
    name, low, high = c.ANNOTATION_THROUGHPUT_PROFILE, bounds.low, bounds.high
    pairs = [part.partition(":") for part in text.split(",")]
    profile: dict[int, float] = {}
    for count, colon, rate in pairs:
        if not colon or not count.strip().isdigit() or int(count) in profile:
            raise ignored(name, text, "is not distinct count:samples/s pairs, e.g. 1:120,2:230")
        profile[int(count)] = _number(rate)
    if not all(math.isfinite(rate) and rate > 0 for rate in profile.values()):
        raise ignored(name, text, "has a rate that is not a positive number")
    outside = sorted(n for n in profile if not low <= n <= high)
    if outside:
        raise AnnotationError(
            f"{name} {text!r}: {outside} outside the job's [{low}, {high}]: ignored"
        )
    return dict(sorted(profile.items()))


def _preemptible(text: str, bounds: Bounds) -> bool:
    if text == "false":
        return False
    if text == "true":
        return True
    raise ignored(c.ANNOTATION_PREEMPTIBLE, text, 'is neither "true" nor "false"')


def _held_since(text: str, bounds: Bounds) -> datetime:
    try:
        return parse_timestamp(text)
    except ValueError:
        message = f"unreadable {c.ANNOTATION_HELD_SINCE} {text!r}: held since the epoch"
        raise AnnotationError(message) from None


class JobAnnotations(BaseModel):
    """Every annotation the engine reads on a job, as `read_annotations` reads them: the defaults
    are a job without any."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    opt_out: Annotated[
        bool,
        Field(
            alias=c.ANNOTATION_OPT_OUT,
            description="the engine never writes the job (a job with an HPA or a Kueue queue is"
            " not the engine's anyway)",
        ),
        Reader(_opt_out, value='`"true"` (any case); anything else is not', report=None),
    ] = False
    weight: Annotated[
        float,
        Field(alias=c.ANNOTATION_WEIGHT, description="the job's weight in the objective"),
        Reader(_weight, value="a number; 0 or less is 1", report=Report.LOG),
    ] = 1.0
    total_samples: Annotated[
        float | None,
        Field(
            alias=c.ANNOTATION_TOTAL_SAMPLES,
            description="the samples the job trains in all: its remaining work is this total"
            " minus what it has trained so far (none: assumed to need as much again as it has"
            " had)",
        ),
        Reader(_total_samples, value='a positive number (`"1.2e9"`)'),
    ] = None
    allowed_replicas: Annotated[
        tuple[int, ...] | None,
        Field(
            alias=c.ANNOTATION_ALLOWED_REPLICAS,
            description="the only worker counts the job may run at, within its"
            " `[minReplicas, maxReplicas]` (none: every count)",
        ),
        Reader(_allowed_replicas, value='counts (`"1,2,4,8"`) or `"powers-of-two"`'),
    ] = None
    throughput_profile: Annotated[
        dict[int, float] | None,
        Field(
            alias=c.ANNOTATION_THROUGHPUT_PROFILE,
            description="the job's samples/s at some worker counts, measured beforehand: a"
            " policy sizes the job by it while it waits (not started yet, or held back; none:"
            " by its own earlier observations, else by the engine's default prior), and while"
            " it runs too under the engine's `trust_declared_profiles`",
        ),
        Reader(
            _throughput_profile,
            value="`count:samples/s` pairs within `[minReplicas, maxReplicas]`"
            ' (`"1:120,2:230,4:430"`)',
        ),
    ] = None
    throughput_query: Annotated[
        str | None,
        Field(
            alias=c.ANNOTATION_THROUGHPUT_QUERY,
            description="the job's own samples/s as a PromQL template over metrics it already"
            " exports (`{namespace}`, `{name}`, `{window}` filled in), for a script without the"
            " training helper",
        ),
        Reader(
            _as_written,
            value="a PromQL template",
            report=None,
            judged="refused by the engine unless confined to the job's namespace: Warning Event"
            " `InvalidAnnotation`, the job keeps its count (`ThroughputQueryRefused`)",
        ),
    ] = None
    preemptible: Annotated[
        bool,
        Field(
            alias=c.ANNOTATION_PREEMPTIBLE,
            description="the engine may hold the job back (suspend it, 0 workers) while others"
            " run, and resumes it at the latest after `settle.max_held_seconds`",
        ),
        Reader(_preemptible, value='`"true"` or `"false"`'),
    ] = False
    held_since: Annotated[
        datetime | None,
        Field(
            alias=c.ANNOTATION_HELD_SINCE,
            description="set in the write that holds the job back, removed when it resumes it:"
            " tells the engine's suspension from a user's (which it never resumes); an"
            " unreadable one dates from the epoch, so the starvation bound is due",
        ),
        Reader(
            _held_since,
            value="an RFC 3339 time",
            report=Report.LOG,
            fallback=EPOCH,
            written_by="engine",
        ),
    ] = None
    state: Annotated[
        str,
        Field(
            alias=c.ANNOTATION_STATE,
            description="the engine's memory of the job, so a new leader resumes where the last"
            " one stopped",
        ),
        Reader(_as_written, value="JSON", report=None, written_by="engine"),
    ] = ""


def reader(field: str) -> Reader:
    """The `Reader` a field of `JobAnnotations` is declared with."""
    return next(m for m in JobAnnotations.model_fields[field].metadata if isinstance(m, Reader))


def read_annotations(
    annotations: Mapping[str, str], bounds: Bounds
) -> tuple[JobAnnotations, list[Problem]]:
    """The job's annotations as the engine reads them, and why any is ignored."""
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, field in JobAnnotations.model_fields.items():
        key, how = str(field.alias), reader(name)
        text = annotations.get(key)
        if text is None:
            continue
        try:
            values[name] = how.parse(text, bounds)
        except AnnotationError as invalid:
            if how.report is None:  # a parser that says every text is valid raised: a bug
                raise
            values[name] = how.fallback_for(field.default)
            problems.append(Problem(key=key, message=str(invalid), report=how.report))
    return JobAnnotations.model_validate(values), problems
