"""The throughput query's pure parts: escaping, rendering, result rules; the reporter's identity."""

import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.clients.prometheus import (
    PrometheusThroughput,
    check_window,
    duration_seconds,
    parse_result,
)
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.throughput_query import check_template, escape_string, render_query
from autoscaler.metrics_contract import (
    DEFAULT_QUERY_TEMPLATE,
    DEFAULT_WINDOW,
    LABEL_JOB_NAME,
    LABEL_NAMESPACE,
    SAMPLES_TOTAL,
)
from autoscaler.training import default_job_name, default_namespace

# -- escaping and rendering ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("bert-large", "bert-large"),
        ("", ""),
        ('a"b', 'a\\"b'),
        ("a\\b", "a\\\\b"),
        ("a\nb", "a\\nb"),
        ("a\rb\tc", "a\\rb\\tc"),
        ("a\x00b\x1fc\x7f", "a\\x00b\\x1fc\\x7f"),
        ('\\"', '\\\\\\"'),  # an escaped quote stays two literal characters
        ('x"} or vector(1) #', 'x\\"} or vector(1) #'),
        ("{name}", "{name}"),
        ("ünï", "ünï"),
    ],
)
def test_escape_string(raw: str, escaped: str) -> None:
    assert escape_string(raw) == escaped


@pytest.mark.parametrize(
    "name", ['x"} or vector(1) #', 'x"}[1m])) or vector(1) #', "a\\", 'a\\"', "x\ny", '\\\\"']
)
def test_an_escaped_name_stays_inside_its_literal(name: str) -> None:
    """Reading the rendered literal back as PromQL (Go) does yields exactly the name."""
    query = render_query(DEFAULT_QUERY_TEMPLATE, namespace="ns", name=name, window="2m")
    literal = query.split(f'{LABEL_JOB_NAME}="', 1)[1]
    contents, rest = _read_literal(literal)
    assert contents == name
    assert rest == "}[2m]))"


def _read_literal(text: str) -> tuple[str, str]:
    """A PromQL double-quoted string's contents up to its closing quote, and what follows."""
    out: list[str] = []
    escapes = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"'}
    i = 0
    while text[i] != '"':
        assert text[i] != "\n", "a raw newline ends a PromQL string"
        if text[i] == "\\":
            kind = text[i + 1]
            if kind == "x":
                out.append(chr(int(text[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(escapes[kind])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out), text[i + 1 :]


def test_default_template() -> None:
    assert DEFAULT_QUERY_TEMPLATE == (
        "sum(rate(autoscaler_training_samples_total"
        '{{namespace="{namespace}", job_name="{name}"}}[{window}]))'
    )
    query = render_query(DEFAULT_QUERY_TEMPLATE, namespace="team-a", name="bert", window="90s")
    assert query == (
        f'sum(rate({SAMPLES_TOTAL}{{{LABEL_NAMESPACE}="team-a", {LABEL_JOB_NAME}="bert"}}[90s]))'
    )
    check_template(DEFAULT_QUERY_TEMPLATE)


def test_custom_template() -> None:
    template = 'sum(irate(my_samples{{ns="{namespace}", job="{name}"}}[{window}])) * 2'
    check_template(template)
    rendered = render_query(template, namespace="n", name='a"b', window="1m30s")
    assert rendered == 'sum(irate(my_samples{ns="n", job="a\\"b"}[1m30s])) * 2'


def test_a_job_with_its_own_query_is_read_with_it() -> None:
    asked: list[str] = []
    source = PrometheusThroughput(url="http://prometheus.invalid")
    source._prom.custom_query = lambda query, timeout: asked.append(query) or []  # type: ignore[method-assign]
    own = 'sum(rate(images_total{{ns="{namespace}", job="{name}"}}[{window}]))'
    created = datetime(2026, 12, 1, tzinfo=UTC)
    jobs = [
        ManagedJob("n", name, 1, 4, 1, 1, Owner.ENGINE, created, throughput_query=query)
        for name, query in (("plain", None), ("own", own))
    ]
    assert source.read(jobs, now=created) == {("n", "plain"): None, ("n", "own"): None}
    assert asked[1] == f'sum(rate(images_total{{ns="n", job="own"}}[{DEFAULT_WINDOW}]))'
    assert asked[0].startswith(f"sum(rate({SAMPLES_TOTAL}")


@pytest.mark.parametrize(
    "template",
    ["{job}", "{}", "{0}", "{name.upper}", "{name[0]}", "{name!r}", "{name:>10}", "{{ok}} {oops}"],
)
def test_check_template_rejects_unknown_fields(template: str) -> None:
    with pytest.raises(ValueError, match="not one of"):
        check_template(template)


@pytest.mark.parametrize("window", ["2m", "30s", "1m30s", "500ms", "1h", "1d", "1w2d"])
def test_check_window_accepts_durations(window: str) -> None:
    check_window(window)


@pytest.mark.parametrize("window", ["", "2", "2 m", "2m]", "2m] or vector(1)", "m", "-1m"])
def test_check_window_rejects_the_rest(window: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        check_window(window)


@pytest.mark.parametrize(
    ("window", "seconds"),
    [
        ("2m", 120.0),
        ("30s", 30.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("1w2d", 777600.0),
    ],
)
def test_a_window_is_read_in_seconds(window: str, seconds: float) -> None:
    assert duration_seconds(window) == pytest.approx(seconds)
    assert (
        PrometheusThroughput(url="http://prometheus.invalid", window=window).window_seconds
        == seconds
    )


# -- result rules ----------------------------------------------------------------------------------


def vector(*values: str) -> list[dict[str, Any]]:
    return [{"metric": {}, "value": [1_700_000_000.0, value]} for value in values]


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (vector("12.5"), 12.5),
        (vector("0"), 0.0),
        (vector("1e3"), 1000.0),
        ([], None),  # no series: the job has not been scraped (yet)
        (vector("NaN"), None),
        (vector("+Inf"), None),
        (vector("-Inf"), None),
        (vector("-0.5"), None),
        ([1_700_000_000.0, "7"], 7.0),  # a scalar template
        ([1_700_000_000.0, "NaN"], None),
    ],
)
def test_parse_result(result: Any, expected: float | None) -> None:
    value = parse_result(result)
    assert value == expected
    assert value is None or math.isfinite(value)


@pytest.mark.parametrize(
    ("result", "match"),
    [
        (vector("1", "2"), "2 series"),
        ({"value": [0, "1"]}, "unexpected"),
        (None, "unexpected"),
        (vector("fast"), "could not convert"),
    ],
)
def test_parse_result_rejects(result: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_result(result)


def test_parse_result_rejects_a_series_without_value() -> None:
    with pytest.raises(KeyError):
        parse_result([{"metric": {}}])


# -- the training helper's identity ----------------------------------------------------------------


def test_identity_from_env(tmp_path: Path) -> None:
    env = {"AUTOSCALER_NAMESPACE": "team-a", "AUTOSCALER_JOB_NAME": "bert"}
    assert default_namespace(env=env, namespace_file=tmp_path / "absent") == "team-a"
    assert default_job_name(env=env, hostname="other-worker-3") == "bert"


def test_identity_from_the_pod(tmp_path: Path) -> None:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("team-b\n")
    assert default_namespace(env={}, namespace_file=namespace_file) == "team-b"
    assert default_job_name(env={}, hostname="bert-large-worker-12") == "bert-large"
    assert default_job_name(env={}, hostname="bert-master-0") == "bert"
    assert default_job_name(env={}, hostname="a-worker-1-worker-0") == "a-worker-1"


def test_identity_unknown_outside_a_pod(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="AUTOSCALER_NAMESPACE"):
        default_namespace(env={}, namespace_file=tmp_path / "absent")
    for host in ("laptop", "bert-worker-", "-worker-0", "bert-launcher-0"):
        with pytest.raises(ValueError, match="AUTOSCALER_JOB_NAME"):
            default_job_name(env={}, hostname=host)


def test_training_helper_imports_no_cluster_clients() -> None:
    code = (
        "import sys, autoscaler.training; "
        "print(sorted(m for m in ('kubernetes', 'prometheus_api_client', 'requests') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
