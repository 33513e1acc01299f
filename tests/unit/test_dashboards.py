"""The Grafana dashboards: deploy/grafana is what the code generates, grafana-foundation-sdk's
dashboard model reads every field of it back, and every query names only series the engine, the
operator and the training pods export (tests/integration/test_dashboards.py runs them against a
real Prometheus)."""

import dataclasses
import json
import re
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
from autoscaler.observability import dashboards
from autoscaler.observability.engine_metrics import engine_metrics
from autoscaler.observability.metrics import UPSTREAM_OBJECT_COUNTERS, operator_metrics

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
BOARDS = {name: build() for name, build in dashboards.DASHBOARDS.items()}
# Series names in a query: the project's and upstream's prefixed ones, and upstream's unprefixed
# object counters (created_pods_total, ...).
UNPREFIXED = "|".join(UPSTREAM_OBJECT_COUNTERS)
SERIES = re.compile(
    rf"\b((?:autoscaler|training_operator)_\w+|(?:{UNPREFIXED})_total)(?=\{{|\[|\)|,| |$)"
)


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
    names["training"] = {contract.SAMPLES_TOTAL}
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
    generated = dashboards.files()
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


def without_prometheus_annotation_options(board: dict[str, Any]) -> dict[str, Any]:
    """`board` less the annotation fields Grafana's Prometheus data source reads but the SDK's
    schema lacks (and so cannot read back)."""
    options = dashboards.PROMETHEUS_ANNOTATION_OPTIONS
    annotations = [
        {key: value for key, value in a.items() if key not in options}
        for a in board["annotations"]["list"]
    ]
    return {**board, "annotations": {**board["annotations"], "list": annotations}}


@pytest.mark.parametrize("name", BOARDS)
def test_the_sdks_dashboard_model_reads_back_every_field(name: str) -> None:
    """grafana-foundation-sdk ships no JSON schema or validator: its strongest check is that its
    typed models read the committed dashboard and write back exactly the same JSON."""
    committed = json.loads((GRAFANA / f"{name}.json").read_text())
    model, written = read_back(committed)
    assert written == without_prometheus_annotation_options(committed)
    panels = [p for p in model.panels or [] if isinstance(p, Panel)]
    assert len(panels) == len(committed["panels"])
    for panel in panels:  # read into the typed models, not kept as raw JSON
        typed = {"timeseries": timeseries.Options, "stat": stat.Options}[panel.type_val]
        assert isinstance(panel.options, typed), panel.title
        targets = panel.targets or []
        assert targets, panel.title
        # not the SDK's UnknownDataquery bag, which keeps any JSON as it is
        assert all(isinstance(t, prometheus.Dataquery) for t in targets), panel.title
    options = dashboards.PROMETHEUS_ANNOTATION_OPTIONS
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
    assert bases - on_board == set()


def test_a_renamed_metric_renames_the_query() -> None:
    """Names come from the metric objects: a rename there reaches the dashboard (and, through
    the checked-in files, fails the first test until they are regenerated)."""
    metrics = engine_metrics()
    renamed = Counter("autoscaler_verdicts", "", ["reason"], registry=CollectorRegistry())
    board = dashboards.scaling_decisions(dataclasses.replace(metrics, decisions=renamed))
    exprs = "\n".join(expressions(board))
    assert "autoscaler_verdicts_total" in exprs
    assert "autoscaler_decisions_total" not in exprs


def test_a_label_the_metric_lacks_is_refused() -> None:
    metrics = engine_metrics()
    relabelled = Counter("autoscaler_decisions", "", ["why"], registry=CollectorRegistry())
    with pytest.raises(ValueError, match="no label 'reason'"):
        dashboards.scaling_decisions(dataclasses.replace(metrics, decisions=relabelled))


def test_the_module_writes_the_files(tmp_path: Path) -> None:
    assert dashboards.main([str(tmp_path / "grafana")]) == 0
    written = {p.name: p.read_text() for p in (tmp_path / "grafana").iterdir()}
    assert written == dashboards.files()
