"""The hand-written lists in the docs match the code: the metrics tables (the registries the
engine, the operator and the training helper build), the operator's flag table (its argument
parser) and the policy table (the policy registry)."""

import argparse
import dataclasses
import re
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from autoscaler.cli import parser
from autoscaler.observability.engine_metrics import engine_metrics
from autoscaler.observability.metrics import operator_metrics
from autoscaler.observability.promql import described
from autoscaler.policies.registry import DEFAULT_POLICY, installed
from autoscaler.training import ThroughputReporter

DOCS = Path(__file__).resolve().parents[2] / "docs"
HEADING = re.compile(r"^(#+) (.*)$")
CODE = re.compile(r"`([^`]+)`")
PARENTHESES = re.compile(r"\([^)]*\)")


def section(page: str, heading: str) -> list[str]:
    """The lines under `heading` up to the next heading of its level or above (code skipped)."""
    lines, fenced, level, found = [], False, 0, False
    for line in (DOCS / page).read_text().splitlines():
        fenced ^= line.startswith("```")
        match = None if fenced else HEADING.match(line)
        if match and found and len(match[1]) <= level:
            break
        if match and match[2] == heading:
            found, level = True, len(match[1])
        elif found:
            lines.append(line)
    assert found, f"{page} has no heading {heading!r}"
    return lines


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip()[1:-1])]


def table(page: str, heading: str) -> tuple[list[str], list[list[str]]]:
    """The first table under `heading`: its header's cells and its rows' cells."""
    lines = section(page, heading)
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    assert start is not None, f"{page}: no table under {heading!r}"
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    header, rule, *rows = lines[start:end]
    assert set(rule) <= set("|-: "), f"{page}: {rule!r} is not a table's header rule"
    return cells(header), [cells(row) for row in rows]


def test_a_table_is_read_from_its_own_section() -> None:
    """The helpers read the table under the heading, not the one of another section."""
    header, rows = table("operations.md", "Deploy")
    assert header == ["what", "files"]
    assert [rows[0][1], rows[-1][1]] == ["`crds/`", "`grafana/`"]
    with pytest.raises(AssertionError, match="no heading"):
        section("operations.md", "No such heading")


def registries() -> list[tuple[CollectorRegistry, object]]:
    """Each component's registry, with the object that holds its metrics."""
    engine, operator = engine_metrics(), operator_metrics()
    return [(engine.registry, engine), (operator.registry, operator)]


def series_name(name: str, kind: str) -> str:
    """A family as the table names it: a counter's `_total`, the others' own name."""
    return f"{name}_total" if kind == "counter" else name


def served(registry: CollectorRegistry) -> set[str]:
    """Every metric a registry serves on /metrics, by the name the table gives it."""
    return {series_name(family.name, family.type) for family in registry.collect()}


def exposed() -> set[str]:
    """Every metric the engine and the operator serve on /metrics."""
    return {name for registry, _ in registries() for name in served(registry)}


def metric_objects(value: Any) -> Iterator[MetricWrapperBase]:
    """The metrics a component's dataclass holds, nested dataclasses and dicts included."""
    if isinstance(value, MetricWrapperBase):
        yield value
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from metric_objects(getattr(value, field.name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from metric_objects(item)


def labels_held(holder: Any) -> dict[str, set[str]]:
    """The label names of each metric `holder` holds, by the name the table gives it."""
    return {
        series_name(*described(metric)): set(metric._labelnames)
        for metric in metric_objects(holder)
    }


def labels_in_code() -> dict[str, set[str]]:
    """Each metric's label names, by the name the table gives it (process_* has none)."""
    return {
        name: labels for _, holder in registries() for name, labels in labels_held(holder).items()
    }


def expand(cell: str, known: set[str]) -> list[str]:
    """The names of a metric cell: `..._suffix` is the previous full name's leading words (as
    many as name a known metric) plus the suffix; one that names none stays as written."""
    names: list[str] = []
    full = ""
    for token in CODE.findall(cell):
        if not token.startswith("..._"):
            full = token
            names.append(token)
            continue
        words = full.split("_")
        candidates = {"_".join([*words[:i], token[4:]]) for i in range(1, len(words))} & known
        assert len(candidates) <= 1, f"{token} after {full} is ambiguous: {candidates}"
        names.append(candidates.pop() if candidates else token)
    return names


def label_names(cell: str) -> set[str]:
    """`result (`ok`, `fallback`)` and `name, controller (both ...)` as their label names."""
    return {name.strip() for name in PARENTHESES.sub("", cell).replace("`", "").split(",")} - {""}


def metrics_table() -> list[tuple[list[str], set[str]]]:
    """Each row's metric names (wildcards kept) and label names."""
    header, rows = table("operations.md", "Metrics")
    assert header == ["metric", "labels", "meaning"]
    known = exposed()
    return [(expand(row[0], known), label_names(row[1])) for row in rows]


def covered(name: str, names: set[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in names)


def test_every_metric_served_is_in_the_metrics_table() -> None:
    """An operator reading /metrics finds every series in the table."""
    names = {name for row, _ in metrics_table() for name in row}
    assert sorted(name for name in exposed() if not covered(name, names)) == []


def test_every_metric_in_the_table_is_served() -> None:
    """A typo or a removed metric in the table names nothing the components serve."""
    served = exposed()
    names = [name for row, _ in metrics_table() for name in row]
    assert [name for name in names if not any(fnmatchcase(s, name) for s in served)] == []
    assert len(names) == len(set(names)), "a metric is listed twice"


def test_the_metrics_table_gives_each_metrics_labels() -> None:
    """A dashboard or alert written from the table selects labels the series have."""
    in_code = labels_in_code()
    # Every served metric but the process collector's is held by its component's dataclass.
    assert {name for name in exposed() if not name.startswith("process_")} == set(in_code)
    wrong = {
        name: (labels, in_code.get(name, set()))
        for row, labels in metrics_table()
        for name in row
        if labels != in_code.get(name, set())
    }
    assert wrong == {}, "metric: (the table's labels, the code's)"


def training_metrics() -> dict[str, set[str]]:
    """Each metric a training pod's helper serves, by the name the table gives it, with its
    labels (every one is declared up front, so none is missed before first use)."""
    reporter = ThroughputReporter(namespace="n", job_name="j")
    labels = labels_held(vars(reporter))
    assert set(labels) == served(reporter.registry), "every served metric is held by the reporter"
    return labels


def test_the_training_metrics_table_matches_the_helper() -> None:
    """A user scraping training pods finds each series, with its labels, in the table."""
    in_code = training_metrics()
    header, rows = table("operations.md", "Exported by training pods")
    assert header == ["metric", "labels", "meaning"]
    listed = {name: label_names(row[1]) for row in rows for name in expand(row[0], set(in_code))}
    assert len(listed) == sum(len(CODE.findall(row[0])) for row in rows), "listed twice"
    assert listed == in_code


def test_the_shorthand_is_read_as_the_table_means_it() -> None:
    """`..._suffix` takes the previous full name's prefix; a wrong one stays unresolved."""
    known = {"autoscaler_job_desired_replicas", "autoscaler_job_current_replicas"}
    assert expand("`autoscaler_job_desired_replicas`, `..._current_replicas`", known) == [
        "autoscaler_job_desired_replicas",
        "autoscaler_job_current_replicas",
    ]
    assert expand("`autoscaler_job_desired_replicas`, `..._curent_replicas`", known)[1] == (
        "..._curent_replicas"
    )
    assert label_names("controller (`pytorchjob-controller`), result (`ok`, `x`)") == {
        "controller",
        "result",
    }


# A flag, then its default in parentheses: `(`:8080`)` or `(off)`.
FLAG = re.compile(r"`(--[\w-]+)`(?: \((?:`([^`]*)`|([^`)]*))\))?")


def operator_flags(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.Action]:
    """Every option string `autoscaler operator` accepts, but --help; `--namespace`'s default,
    read from $KUBEFLOW_NAMESPACE when the parser is built, reads as the table writes it."""
    monkeypatch.setenv("KUBEFLOW_NAMESPACE", "$KUBEFLOW_NAMESPACE")
    [commands] = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    operator: argparse.ArgumentParser = commands.choices["operator"]
    return {
        option: action
        for action in operator._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }


def flags_table() -> dict[str, str | None]:
    """Each flag in the table, with the default written after it (None where none is)."""
    header, rows = table("operations.md", "Upstream's Deployment, with the image swapped")
    assert header == ["flags", "here"]
    found = [m.groups() for row in rows for m in FLAG.finditer(row[0])]
    flags = {flag: coded if coded is not None else plain for flag, coded, plain in found}
    assert len(flags) == len(found), "a flag is listed twice"
    return flags


def shown(action: argparse.Action) -> str:
    """A default as the table writes it: `off` for a switch, `false` for a Go bool, `300`."""
    if action.nargs == 0:
        return "on" if action.default else "off"
    if isinstance(action.default, bool):
        return str(action.default).lower()
    if isinstance(action.default, float):
        return f"{action.default:g}"
    return str(action.default)


def test_every_operator_flag_is_in_the_flag_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag the operator takes is listed, and a flag listed is taken (a typo fails)."""
    listed, taken = set(flags_table()), set(operator_flags(monkeypatch))
    assert (taken - listed, listed - taken) == (set(), set()), "(not listed, not taken)"


def test_the_flag_tables_defaults_are_the_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A default written in the table is the one the operator starts with."""
    actions = operator_flags(monkeypatch)
    written = {flag: default for flag, default in flags_table().items() if default is not None}
    assert {"--metrics-bind-address", "--leader-elect", "--namespace", "--kueue"} <= set(written)
    assert {flag: shown(actions[flag]) for flag in written if flag in actions} == written


def test_the_flag_row_is_read_as_written() -> None:
    """Both spellings of a default are read, and a flag without one has none."""
    row = "`--a` (`:8080`), `--b` (off), `--c`, `--d-e` (`$X`)"
    assert [m.groups() for m in FLAG.finditer(row)] == [
        ("--a", ":8080", None),
        ("--b", None, "off"),
        ("--c", None, None),
        ("--d-e", "$X", None),
    ]


def built_in_policies() -> set[str]:
    """The policies the package itself registers (a plug-in installed beside it is not one)."""
    return {name for name, entry in installed().items() if entry.module.startswith("autoscaler.")}


def policy_table() -> list[str]:
    header, rows = table("policies.md", "Policies and objectives")
    assert header == ["policy", "what it does"]
    return [row[0] for row in rows]


def test_the_policy_table_lists_every_built_in_once() -> None:
    """`autoscaler policies` and the table name the same built-ins."""
    names = [CODE.findall(cell)[0] for cell in policy_table()]
    listed, built_in = set(names), built_in_policies()
    assert (built_in - listed, listed - built_in) == (set(), set()), "(not listed, not built in)"
    assert len(names) == len(listed), "a policy is listed twice"


def test_the_policy_table_marks_the_default() -> None:
    """The row marked `(default)` is the policy the engine runs unless told."""
    assert [CODE.findall(c)[0] for c in policy_table() if "(default)" in c] == [DEFAULT_POLICY]
