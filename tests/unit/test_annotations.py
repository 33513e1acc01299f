"""The engine's job annotations, declared once: each read, defaulted and reported the same way."""

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.api import coordinates as c
from autoscaler.api.annotations import (
    EPOCH,
    Bounds,
    JobAnnotations,
    Report,
    read_annotations,
    reader,
)
from autoscaler.api.ownership import Owner
from tests.unit.test_remaining_work import pytorchjob

BOUNDS = Bounds(low=1, high=8)


def warns(message: str) -> tuple[str, Report]:
    return message, Report.WARNING


def logs(message: str) -> tuple[str, Report]:
    return message, Report.LOG


# (annotation, text, field, value read, the problem reported word for word and where: a Warning
# or the log).
CASES: list[tuple[str, str, str, Any, tuple[str, Report] | None]] = [
    (c.ANNOTATION_OPT_OUT, "true", "opt_out", True, None),
    (c.ANNOTATION_OPT_OUT, "True", "opt_out", True, None),
    (c.ANNOTATION_OPT_OUT, "yes", "opt_out", False, None),
    (c.ANNOTATION_WEIGHT, "2", "weight", 2.0, None),
    (c.ANNOTATION_WEIGHT, "0.5", "weight", 0.5, None),
    (c.ANNOTATION_WEIGHT, "0", "weight", 1.0, None),
    (c.ANNOTATION_WEIGHT, "-3", "weight", 1.0, None),
    (c.ANNOTATION_WEIGHT, "heavy", "weight", 1.0,
     logs("ignoring weight annotation 'heavy': not a number")),
    (c.ANNOTATION_TOTAL_SAMPLES, "1.5e6", "total_samples", 1.5e6, None),
    (c.ANNOTATION_TOTAL_SAMPLES, "-3", "total_samples", None,
     warns("elastic-autoscaler.io/total-samples '-3' is not a positive number: ignored")),
    (c.ANNOTATION_TOTAL_SAMPLES, "0", "total_samples", None,
     warns("elastic-autoscaler.io/total-samples '0' is not a positive number: ignored")),
    (c.ANNOTATION_TOTAL_SAMPLES, "inf", "total_samples", None,
     warns("elastic-autoscaler.io/total-samples 'inf' is not a positive number: ignored")),
    (c.ANNOTATION_TOTAL_SAMPLES, "lots", "total_samples", None,
     warns("elastic-autoscaler.io/total-samples 'lots' is not a positive number: ignored")),
    (c.ANNOTATION_ALLOWED_REPLICAS, "8, 2,4,2", "allowed_replicas", (2, 4, 8), None),
    (c.ANNOTATION_ALLOWED_REPLICAS, " powers-of-two", "allowed_replicas", (1, 2, 4, 8), None),
    (c.ANNOTATION_ALLOWED_REPLICAS, "1,x", "allowed_replicas", None,
     warns("elastic-autoscaler.io/allowed-replicas '1,x' is neither a comma-separated list of counts"
           " nor powers-of-two: ignored")),
    (c.ANNOTATION_ALLOWED_REPLICAS, "", "allowed_replicas", None,
     warns("elastic-autoscaler.io/allowed-replicas '' is neither a comma-separated list of counts"
           " nor powers-of-two: ignored")),
    (c.ANNOTATION_ALLOWED_REPLICAS, "2,16", "allowed_replicas", None,
     warns("elastic-autoscaler.io/allowed-replicas '2,16': [16] outside the job's [1, 8]: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "4:430, 1:120,2:230", "throughput_profile",
     {1: 120.0, 2: 230.0, 4: 430.0}, None),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "8:1e3", "throughput_profile", {8: 1000.0}, None),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "1:120,2", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile '1:120,2' is not distinct count:samples/s"
           " pairs, e.g. 1:120,2:230: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "1:120,1:130", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile '1:120,1:130' is not distinct"
           " count:samples/s pairs, e.g. 1:120,2:230: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "x:120", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile 'x:120' is not distinct count:samples/s"
           " pairs, e.g. 1:120,2:230: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile '' is not distinct count:samples/s pairs,"
           " e.g. 1:120,2:230: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "1:0", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile '1:0' has a rate that is not a positive"
           " number: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "2:inf", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile '2:inf' has a rate that is not a positive"
           " number: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "2:fast", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile '2:fast' has a rate that is not a positive"
           " number: ignored")),
    (c.ANNOTATION_THROUGHPUT_PROFILE, "0:5,16:90", "throughput_profile", None,
     warns("elastic-autoscaler.io/throughput-profile '0:5,16:90': [0, 16] outside the job's"
           " [1, 8]: ignored")),
    (c.ANNOTATION_THROUGHPUT_QUERY, "vector(1)", "throughput_query", "vector(1)", None),
    (c.ANNOTATION_THROUGHPUT_QUERY, "   ", "throughput_query", "   ", None),
    (c.ANNOTATION_PREEMPTIBLE, "true", "preemptible", True, None),
    (c.ANNOTATION_PREEMPTIBLE, "false", "preemptible", False, None),
    (c.ANNOTATION_PREEMPTIBLE, "True", "preemptible", False,
     warns("elastic-autoscaler.io/preemptible 'True' is neither \"true\" nor \"false\": ignored")),
    (c.ANNOTATION_HELD_SINCE, "2026-12-01T10:00:00Z", "held_since",
     datetime(2026, 12, 1, 10, tzinfo=UTC), None),
    (c.ANNOTATION_HELD_SINCE, "soon", "held_since", EPOCH,
     logs("unreadable elastic-autoscaler.io/held-since 'soon': held since the epoch")),
    (c.ANNOTATION_STATE, '{"replicas": 2}', "state", '{"replicas": 2}', None),
]  # fmt: skip


@pytest.mark.parametrize(("key", "text", "field", "value", "reported"), CASES)
def test_each_annotation_is_read_or_ignored_with_its_reason(
    key: str, text: str, field: str, value: Any, reported: tuple[str, Report] | None
) -> None:
    found, problems = read_annotations({key: text}, BOUNDS)
    assert getattr(found, field) == value
    assert [(p.message, p.report) for p in problems] == ([reported] if reported else [])
    assert all(p.key == key for p in problems)
    others = {name: getattr(found, name) for name in JobAnnotations.model_fields if name != field}
    assert others == {name: getattr(JobAnnotations(), name) for name in others}


def test_absent_annotations_are_the_defaults() -> None:
    found, problems = read_annotations({"unrelated": "x"}, BOUNDS)
    assert (found, problems) == (JobAnnotations(), [])
    assert found.model_dump() == {
        "opt_out": False,
        "weight": 1.0,
        "total_samples": None,
        "allowed_replicas": None,
        "throughput_profile": None,
        "throughput_query": None,
        "preemptible": False,
        "held_since": None,
        "state": "",
    }


def test_allowed_counts_are_read_within_the_jobs_bounds() -> None:
    powers = {c.ANNOTATION_ALLOWED_REPLICAS: "powers-of-two"}
    assert read_annotations(powers, Bounds(low=3, high=16))[0].allowed_replicas == (4, 8, 16)
    found, problems = read_annotations(powers, Bounds(low=5, high=7))
    assert found.allowed_replicas is None
    assert [p.message for p in problems] == [
        "elastic-autoscaler.io/allowed-replicas: no power of two lies in [5, 7]: ignored"
    ]


def test_every_problem_is_reported_in_the_declarations_order() -> None:
    annotations = {
        c.ANNOTATION_PREEMPTIBLE: "maybe",
        c.ANNOTATION_ALLOWED_REPLICAS: "1,x",
        c.ANNOTATION_TOTAL_SAMPLES: "-3",
        c.ANNOTATION_WEIGHT: "heavy",
    }
    _, problems = read_annotations(annotations, BOUNDS)
    assert [p.key for p in problems] == [
        c.ANNOTATION_WEIGHT,
        c.ANNOTATION_TOTAL_SAMPLES,
        c.ANNOTATION_ALLOWED_REPLICAS,
        c.ANNOTATION_PREEMPTIBLE,
    ]


def test_every_annotation_is_declared_with_its_key_meaning_and_reader() -> None:
    keys = [field.alias for field in JobAnnotations.model_fields.values()]
    assert keys == [
        c.ANNOTATION_OPT_OUT,
        c.ANNOTATION_WEIGHT,
        c.ANNOTATION_TOTAL_SAMPLES,
        c.ANNOTATION_ALLOWED_REPLICAS,
        c.ANNOTATION_THROUGHPUT_PROFILE,
        c.ANNOTATION_THROUGHPUT_QUERY,
        c.ANNOTATION_PREEMPTIBLE,
        c.ANNOTATION_HELD_SINCE,
        c.ANNOTATION_STATE,
    ]
    for name, field in JobAnnotations.model_fields.items():
        assert field.description, name
        assert reader(name).value, name
        assert reader(name).written_by in {"user", "engine"}, name
    read = {key for key, *_ in CASES}
    assert read == set(keys), "every annotation has a row in CASES"


def test_a_job_warns_of_its_annotations_and_logs_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    annotations = {
        c.ANNOTATION_TOTAL_SAMPLES: "-3",
        c.ANNOTATION_PREEMPTIBLE: "maybe",
        c.ANNOTATION_WEIGHT: "heavy",
        c.ANNOTATION_HELD_SINCE: "soon",
    }
    with caplog.at_level(logging.WARNING, logger="autoscaler.clients.jobs"):
        job = pytorchjob(annotations)
    assert job.problems == (
        "elastic-autoscaler.io/total-samples '-3' is not a positive number: ignored",
        'elastic-autoscaler.io/preemptible \'maybe\' is neither "true" nor "false": ignored',
    )
    assert (job.weight, job.held_since, job.preemptible) == (1.0, EPOCH, False)
    assert [r.getMessage() for r in caplog.records if r.name == "autoscaler.clients.jobs"] == [
        "ignoring weight annotation 'heavy': not a number",
        "unreadable elastic-autoscaler.io/held-since 'soon': held since the epoch",
    ]


def test_the_opt_out_annotation_makes_the_job_its_users() -> None:
    job = pytorchjob({c.ANNOTATION_OPT_OUT: "TRUE"})
    assert job.owner is Owner.OPTED_OUT


def test_a_declared_profile_reaches_the_engines_view_and_a_bad_one_warns() -> None:
    assert pytorchjob({c.ANNOTATION_THROUGHPUT_PROFILE: "1:120,2:230"}).throughput_profile == {
        1: 120.0,
        2: 230.0,
    }
    job = pytorchjob({c.ANNOTATION_THROUGHPUT_PROFILE: "1:fast"})
    assert job.throughput_profile is None
    assert job.problems == (
        "elastic-autoscaler.io/throughput-profile '1:fast' has a rate that is not a positive"
        " number: ignored",
    )
