"""The Grafana dashboards: deploy/grafana is what the code generates, grafana-foundation-sdk's
dashboard model reads every field of it back with values of the types its annotations declare,
and every query names only series the engine, the operator and the training pods export
(tests/integration/test_dashboards.py runs them against a real Prometheus)."""

import dataclasses
import enum
import json
import re
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import prometheus, stat, timeseries
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel
from prometheus_client import CollectorRegistry, Counter

from autoscaler import metrics_contract as contract
from autoscaler.observability.dashboards.__main__ import main
from autoscaler.observability.dashboards.board import PROMETHEUS_ANNOTATION_OPTIONS
from autoscaler.observability.dashboards.generated import DASHBOARDS, files
from autoscaler.observability.dashboards.scaling_decisions import scaling_decisions
from autoscaler.observability.engine_metrics import engine_metrics
from autoscaler.observability.metrics import UPSTREAM_OBJECT_COUNTERS, operator_metrics

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
BOARDS = {name: build() for name, build in DASHBOARDS.items()}
# Series names in a query: the project's and upstream's prefixed ones, and upstream's unprefixed
# object counters (created_pods_total, ...).
UNPREFIXED = "|".join(UPSTREAM_OBJECT_COUNTERS)
SERIES = re.compile(
    rf"\b((?:autoscaler|training_operator)_\w+|(?:{UNPREFIXED})_total)(?=\{{|\[|\)|,| |$)"
)


UPSTREAMS_MANAGER = ("controller_runtime_", "workqueue_", "process_")


def exported() -> dict[str, set[str]]:
    """Every series name each component exports, by component."""
    names: dict[str, set[str]] = {}
    for component, registry in (
        ("engine", engine_metrics().registry),
        ("operator", operator_metrics().registry),
    ):
        names[component] = {
            sample_name
            for metric in registry.collect()
            for sample_name in _sample_names(metric.name, metric.type)
        }
    names["training"] = {contract.SAMPLES_TOTAL, contract.GRADIENT_NOISE_SCALE}
    return names


def _sample_names(name: str, kind: str) -> set[str]:
    return {
        "counter": {f"{name}_total"},
        "gauge": {name},
        "histogram": {f"{name}_bucket", f"{name}_sum", f"{name}_count"},
    }[kind]


def expressions(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    exprs += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_the_checked_in_files_are_the_generated_ones() -> None:
    """After renaming a metric or changing a panel: `make dashboards`."""
    generated = files()
    assert sorted(p.name for p in GRAFANA.iterdir()) == sorted(generated)
    for name, text in generated.items():
        assert (GRAFANA / name).read_text() == text, f"deploy/grafana/{name} is stale"


def test_the_configmaps_embed_the_dashboards_for_the_sidecar() -> None:
    maps = list(yaml.safe_load_all((GRAFANA / "dashboards.yaml").read_text()))
    assert len(maps) == len(BOARDS)
    for configmap, (name, board) in zip(maps, BOARDS.items(), strict=True):
        assert configmap["kind"] == "ConfigMap"
        assert configmap["metadata"]["namespace"] == "elastic-autoscaler"
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(configmap["data"][f"{name}.json"]) == board
    kustomization = yaml.safe_load((GRAFANA / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["dashboards.yaml"]


def read_back(board: dict[str, Any]) -> tuple[Dashboard, dict[str, Any]]:
    """The SDK's Dashboard model of `board`, and the JSON that model writes.

    With the SDK's panel and query plugins registered, from_json reads each panel's options and
    field config into the typed models of its panel type and each target into the model of its
    data source's queries; a key none of these models has is dropped, a missing one gets its
    default: the JSON written back differs from `board` wherever the schema disagrees."""
    register_default_plugins()
    model = Dashboard.from_json(board)
    return model, json.loads(json.dumps(model, cls=JSONEncoder))


UNIONS = (typing.Union, types.UnionType)


def type_errors(value: object, annotation: Any, path: str) -> list[str]:
    """Where `value`, read by the SDK's models, breaks the models' type annotations.

    The SDK's from_json copies values as they come (a gridPos.h of "eight" stays a string) and
    ships no validator, so the annotations are the schema: every attribute of every model object
    is checked against its class's annotation, down through lists, dicts and nested models (a
    panel's options and a target are checked against their concrete plugin models)."""
    if annotation in (Any, object):
        return model_type_errors(value, path)
    if typing.get_origin(annotation) in UNIONS:
        fitting = [
            option for option in typing.get_args(annotation) if has_outer_type(value, option)
        ]
        if not fitting:
            return [f"{path}: {value!r} is not {annotation}"]
        return min((type_errors(value, option, path) for option in fitting), key=len)
    if not has_outer_type(value, annotation):
        return [f"{path}: {value!r} is not {annotation}"]
    return content_type_errors(value, annotation, path)


def content_type_errors(value: object, annotation: Any, path: str) -> list[str]:
    """The items of a list or dict, or the attributes of a model, against their annotations."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return [
            error
            for index, item in enumerate(typing.cast(list[object], value))
            for error in type_errors(item, arguments[0], f"{path}[{index}]")
        ]
    if origin is dict:
        return [
            error
            for key, item in typing.cast(dict[object, object], value).items()
            for error in type_errors(key, arguments[0], f"{path} key {key!r}")
            + type_errors(item, arguments[1], f"{path}[{key!r}]")
        ]
    return model_type_errors(value, path)


def has_outer_type(value: object, annotation: Any) -> bool:
    """`value` against the outermost part of `annotation` (a list, not yet its items)."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (Any, object):
        return True
    if origin in UNIONS:
        return any(has_outer_type(value, option) for option in arguments)
    if origin is typing.Literal:
        return any(value == allowed and type(value) is type(allowed) for allowed in arguments)
    return is_json_value_of(value, origin or annotation)


def is_json_value_of(value: object, kind: Any) -> bool:
    if kind is type(None):
        return value is None
    if kind in (int, float):  # JSON has one number type; a bool is not one
        numbers = (int,) if kind is int else (int, float)
        return isinstance(value, numbers) and not isinstance(value, bool)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return value in {member.value for member in kind}  # from_json keeps raw values
    if isinstance(kind, type):
        return isinstance(value, kind)
    raise TypeError(f"{kind!r}: an annotation form this check does not know")


@cache
def sdk_annotations(model: type) -> dict[str, Any]:
    return typing.get_type_hints(model)


def model_type_errors(value: object, path: str) -> list[str]:
    model = type(value)
    if not model.__module__.startswith("grafana_foundation_sdk."):
        return []
    return [
        error
        for name, annotation in sdk_annotations(model).items()
        for error in type_errors(getattr(value, name), annotation, f"{path}.{name}")
    ]


def without_prometheus_annotation_options(board: dict[str, Any]) -> dict[str, Any]:
    """`board` less the annotation fields Grafana's Prometheus data source reads but the SDK's
    schema lacks (and so cannot read back)."""
    options = PROMETHEUS_ANNOTATION_OPTIONS
    annotations = [
        {key: value for key, value in a.items() if key not in options}
        for a in board["annotations"]["list"]
    ]
    return {**board, "annotations": {**board["annotations"], "list": annotations}}


@pytest.mark.parametrize("name", BOARDS)
def test_the_sdks_dashboard_model_reads_back_every_field(name: str) -> None:
    """grafana-foundation-sdk ships no JSON schema or validator: its strongest checks are that
    its typed models read the committed dashboard and write back exactly the same JSON, and
    that every value they read has the type their annotations declare."""
    committed = json.loads((GRAFANA / f"{name}.json").read_text())
    model, written = read_back(committed)
    assert written == without_prometheus_annotation_options(committed)
    assert type_errors(model, Dashboard, "dashboard") == []
    panels = [p for p in model.panels or [] if isinstance(p, Panel)]
    assert len(panels) == len(committed["panels"])
    for panel in panels:  # read into the typed models, not kept as raw JSON
        typed = {"timeseries": timeseries.Options, "stat": stat.Options}[panel.type_val]
        assert isinstance(panel.options, typed), panel.title
        targets = panel.targets or []
        assert targets, panel.title
        # not the SDK's UnknownDataquery bag, which keeps any JSON as it is
        assert all(isinstance(t, prometheus.Dataquery) for t in targets), panel.title
    options = PROMETHEUS_ANNOTATION_OPTIONS
    with_options = [a for a in committed["annotations"]["list"] if "expr" in a]
    assert all(set(options) <= set(a) for a in with_options)


@pytest.mark.parametrize(
    ("where", "field"),
    [
        (("panels", 0, "targets", 0), "legendFromat"),  # misspelt
        (("panels", 0, "options"), "unit"),  # misplaced: a field option
        (("templating", "list", 1), "allValues"),
    ],
)
def test_the_sdk_read_back_catches_a_field_the_schema_lacks(
    where: tuple[str | int, ...], field: str
) -> None:
    board = json.loads(json.dumps(BOARDS["operator-health"]))
    node = board
    for key in where:
        node = node[key]
    node[field] = "x"
    _, written = read_back(board)
    assert written != without_prometheus_annotation_options(board)


@pytest.mark.parametrize(
    ("where", "field", "wrong", "reported"),
    [
        (("panels", 0, "gridPos"), "h", "eight", "dashboard.panels[0].grid_pos.h"),
        (("panels", 0, "targets", 0), "expr", 42, "dashboard.panels[0].targets[0].expr"),
        (("panels", 1), "id", 2.5, "dashboard.panels[1].id_val"),
        (("templating", "list", 1), "multi", "yes", "dashboard.templating.list_val[1].multi"),
        (("panels", 0, "options"), "wideLayout", 1, "dashboard.panels[0].options.wide_layout"),
        (
            ("panels", 0, "options", "reduceOptions"),
            "calcs",
            "lastNotNull",
            ".reduce_options.calcs",
        ),
        (("panels", 0), "repeatDirection", "sideways", "dashboard.panels[0].repeat_direction"),
    ],
)
def test_the_type_check_catches_a_value_of_the_wrong_type(
    where: tuple[str | int, ...], field: str, wrong: object, reported: str
) -> None:
    board = json.loads(json.dumps(BOARDS["operator-health"]))
    node = board
    for key in where:
        node = node[key]
    node[field] = wrong
    model, written = read_back(board)
    assert written == without_prometheus_annotation_options(board)  # the read-back alone misses it
    errors = type_errors(model, Dashboard, "dashboard")
    assert errors, f"{reported} = {wrong!r} passed"
    assert all(reported in error for error in errors), errors


@pytest.mark.parametrize(
    ("value", "annotation", "errors"),
    [
        (True, int, 1),
        (3, float, 0),
        (None, str | None, 0),
        (1, str | None, 1),
        (["a", 1], list[str], 1),
        ({"a": 1}, dict[str, str], 1),
        ("h", typing.Literal["h", "v"], 0),
    ],
)
def test_the_type_check_reads_annotations(value: object, annotation: Any, errors: int) -> None:
    assert len(type_errors(value, annotation, "x")) == errors


@pytest.mark.parametrize("name", BOARDS)
def test_dashboard_is_current_and_uses_the_datasource_variable(name: str) -> None:
    board = BOARDS[name]
    assert board["schemaVersion"] >= 39
    assert 0 < len(board["uid"]) <= 40
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert (variable["multi"], variable["includeAll"]) == (True, True)
            assert variable["query"].startswith("label_values(")
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert all((target["expr"], target["legendFormat"]))
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("name", BOARDS)
def test_panels_fit_the_grid_without_overlapping(name: str) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in BOARDS[name]["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] in range(24 - pos["w"] + 1), panel["title"]
        area = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not area & cells, panel["title"]
        cells |= area


def test_job_variables_come_from_the_engines_job_metrics() -> None:
    variables = {v["name"]: v for v in BOARDS["scaling-decisions"]["templating"]["list"]}
    assert variables["namespace"]["query"].startswith("label_values(autoscaler_job_")
    assert variables["namespace"]["query"].endswith(", namespace)")
    assert variables["job"]["query"].endswith(", pytorchjob)")
    assert '$namespace"' in variables["job"]["query"]  # jobs of the chosen namespaces


def test_every_query_names_only_exported_series_and_every_metric_is_shown() -> None:
    names = exported()
    shown = {
        name: {s for expr in expressions(board) for s in SERIES.findall(expr)}
        for name, board in BOARDS.items()
    }
    assert shown["scaling-decisions"] <= names["engine"] | names["training"]
    assert shown["operator-health"] <= names["operator"]
    # Every metric on a dashboard (a histogram through its buckets).
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in names["engine"]}
    on_board = {re.sub(r"_bucket$", "", n) for n in shown["scaling-decisions"]}
    assert bases - on_board == set()
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in names["operator"]}
    on_board = {re.sub(r"_bucket$", "", n) for n in shown["operator-health"]}
    # controller-runtime's and the process' series are for dashboards built for upstream's
    # manager; this one shows the same facts under the operator's own names.
    assert {b for b in bases - on_board if not b.startswith(UPSTREAMS_MANAGER)} == set()


def test_a_renamed_metric_renames_the_query() -> None:
    """Names come from the metric objects: a rename there reaches the dashboard (and, through
    the checked-in files, fails the first test until they are regenerated)."""
    metrics = engine_metrics()
    renamed = Counter("autoscaler_verdicts", "", ["reason"], registry=CollectorRegistry())
    board = scaling_decisions(dataclasses.replace(metrics, decisions=renamed))
    exprs = "\n".join(expressions(board))
    assert "autoscaler_verdicts_total" in exprs
    assert "autoscaler_decisions_total" not in exprs


def test_a_label_the_metric_lacks_is_refused() -> None:
    metrics = engine_metrics()
    relabelled = Counter("autoscaler_decisions", "", ["why"], registry=CollectorRegistry())
    with pytest.raises(ValueError, match="no label 'reason'"):
        scaling_decisions(dataclasses.replace(metrics, decisions=relabelled))


def test_the_module_writes_the_files(tmp_path: Path) -> None:
    assert main([str(tmp_path / "grafana")]) == 0
    written = {p.name: p.read_text() for p in (tmp_path / "grafana").iterdir()}
    assert written == files()
