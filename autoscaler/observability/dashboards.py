"""Grafana dashboards for the engine and the operator, generated from code (plain JSON dicts).

`python -m autoscaler.observability.dashboards deploy/grafana` (`make dashboards`) writes
`scaling-decisions.json` and `operator-health.json` (for Grafana's "Import dashboard"), the same
JSON in ConfigMaps labelled `grafana_dashboard: "1"` for Grafana's dashboard sidecar
(`dashboards.yaml`), and the `kustomization.yaml` listing them.

No metric name is spelled here: every query names its series through the metric objects of
`engine_metrics()` and `operator_metrics()` (and `metrics_contract` for the training counter),
and every label it groups or filters by is checked against the metric's own label names. A
renamed metric therefore changes the generated files: tests/unit/test_dashboards.py fails until
they are regenerated, and tests/integration/test_dashboards.py runs every query against a real
Prometheus fed by the real engine and operator.

Queries use Grafana's variables: `$namespace`, `$job` and `$instance` (the dashboards' own,
multi-select with All) and `$__rate_interval`/`$__range` (Grafana's). Annotations look back
`$__rate_interval` (not `$__interval`): windows that overlap by a scrape never miss a change
that falls between two steps.
"""

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from prometheus_client.metrics import MetricWrapperBase

from autoscaler import metrics_contract as contract
from autoscaler.observability.engine_metrics import JOB_LABELS, EngineMetrics, engine_metrics
from autoscaler.observability.metrics import OperatorMetrics, operator_metrics

JSON = dict[str, Any]
SCHEMA_VERSION: Final = 39
DATASOURCE: Final[JSON] = {"type": "prometheus", "uid": "${datasource}"}
NAMESPACE: Final = "elastic-autoscaler"  # where deploy/ puts the ConfigMaps
SIDECAR_LABEL: Final = "grafana_dashboard"  # the label Grafana's dashboard sidecar looks for
INSTANCE: Final = "instance"  # Prometheus' target label: one engine or operator replica
QUANTILES: Final = (0.5, 0.9, 0.99)
REFS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WIDTH: Final = 24  # Grafana's grid

LABEL_NAMESPACE, LABEL_JOB = JOB_LABELS  # the engine's per-job labels


# -- metric names, from the metric objects -------------------------------------------------------


def _described(metric: MetricWrapperBase) -> tuple[str, str]:
    (described,) = metric.describe()
    return described.name, described.type


def series(metric: MetricWrapperBase) -> str:
    """The series a query selects: a gauge's name, a counter's `_total`."""
    name, kind = _described(metric)
    if kind == "counter":
        return f"{name}_total"
    if kind == "gauge":
        return name
    raise ValueError(f"{name} is a {kind}: select its buckets with `buckets`")


def buckets(metric: MetricWrapperBase) -> str:
    name, kind = _described(metric)
    if kind != "histogram":
        raise ValueError(f"{name} is a {kind}, not a histogram")
    return f"{name}_bucket"


def label(metric: MetricWrapperBase, name: str) -> str:
    """`name`, once checked to be one of the metric's labels."""
    names: tuple[str, ...] = metric._labelnames
    if name not in names:
        raise ValueError(f"{_described(metric)[0]} has no label {name!r} (only {names})")
    return name


def _select(name: str, *matchers: str) -> str:
    return f"{name}{{{', '.join(matchers)}}}" if matchers else name


def _matches(labelname: str, variable: str) -> str:
    return f'{labelname}=~"${variable}"'


ON_INSTANCE: Final = _matches(INSTANCE, "instance")


def _job_series(metric: MetricWrapperBase) -> str:
    """A per-job engine series, filtered by the dashboard's namespace, job and instance."""
    return _select(
        series(metric),
        _matches(label(metric, LABEL_NAMESPACE), "namespace"),
        _matches(label(metric, LABEL_JOB), "job"),
        ON_INSTANCE,
    )


def _rate(selected: str, window: str = "$__rate_interval") -> str:
    return f"rate({selected}[{window}])"


def _quantiles(metric: MetricWrapperBase, *matchers: str) -> list[JSON]:
    rate = _rate(_select(buckets(metric), *matchers))
    return [
        _target(f"histogram_quantile({q:g}, sum by (le) ({rate}))", f"p{round(q * 100)}")
        for q in QUANTILES
    ]


# -- panels, variables, annotations --------------------------------------------------------------


def _target(expr: str, legend: str) -> JSON:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "range": True}


def _panel(kind: str, title: str, description: str, targets: Sequence[JSON], width: int) -> JSON:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8 if kind == "timeseries" else 4, "w": width, "x": 0, "y": 0},
        "targets": [{**t, "refId": REFS[i]} for i, t in enumerate(targets)],
    }


def timeseries(
    title: str,
    description: str,
    targets: Sequence[JSON],
    *,
    unit: str,
    width: int = 12,
    decimals: int | None = None,
    dashed: str | None = None,
    no_value: str | None = None,
) -> JSON:
    """A time series panel; series whose display name matches the regex `dashed` are dashed."""
    defaults: JSON = {
        "unit": unit,
        "min": 0,
        "color": {"mode": "palette-classic"},
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "spanNulls": False,
        },
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    if no_value is not None:
        defaults["noValue"] = no_value
    overrides = []
    if dashed:
        overrides.append(
            {
                "matcher": {"id": "byRegexp", "options": dashed},
                "properties": [
                    {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                    {"id": "custom.fillOpacity", "value": 0},
                ],
            }
        )
    return {
        **_panel("timeseries", title, description, targets, width),
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(
    title: str,
    description: str,
    targets: Sequence[JSON],
    *,
    unit: str,
    width: int = 4,
    mappings: Sequence[JSON] = (),
    warn_from: float | None = None,
    no_value: str | None = None,
) -> JSON:
    """A stat panel of each series' last value; red from `warn_from` on, else green."""
    steps: list[JSON] = [{"color": "green", "value": None}]
    if warn_from is not None:
        steps.append({"color": "red", "value": warn_from})
    defaults: JSON = {
        "unit": unit,
        "mappings": list(mappings),
        "color": {"mode": "thresholds"},
        "thresholds": {"mode": "absolute", "steps": steps},
    }
    if no_value is not None:
        defaults["noValue"] = no_value
    return {
        **_panel("stat", title, description, targets, width),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
        },
    }


def _leader_mappings() -> list[JSON]:
    return [
        {
            "type": "value",
            "options": {
                "0": {"text": "standby", "color": "yellow", "index": 1},
                "1": {"text": "leader", "color": "green", "index": 0},
            },
        }
    ]


def datasource_variable() -> JSON:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_variable(name: str, title: str, metric: str, labelname: str, *matchers: str) -> JSON:
    """A multi-select variable (with All) of `labelname`'s values on `metric`'s series."""
    query = f"label_values({_select(metric, *matchers)}, {labelname})"
    return {
        "name": name,
        "label": title,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": query,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "hide": 0,
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "options": [],
        "refresh": 2,  # on time range change: jobs come and go
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
    }


def annotation(
    name: str, expr: str, *, title: str, text: str, tags: Sequence[str], color: str
) -> JSON:
    """A Prometheus annotation: a mark wherever `expr` has a value (title and tags from labels)."""
    return {
        "name": name,
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": color,
        "expr": expr,
        "titleFormat": title,
        "textFormat": text,
        "tagKeys": ",".join(tags),
        "useValueForTime": False,
    }


BUILT_IN_ANNOTATIONS: Final[JSON] = {
    "builtIn": 1,
    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "enable": True,
    "hide": True,
    "iconColor": "rgba(0, 211, 255, 1)",
    "name": "Annotations & Alerts",
    "type": "dashboard",
}


def _placed(panels: Sequence[JSON]) -> list[JSON]:
    """Ids in order, and positions: left to right, a new row when the next panel does not fit."""
    placed, x, y, row_height = [], 0, 0, 0
    for index, panel in enumerate(panels, start=1):
        w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
        if x + w > WIDTH:
            x, y, row_height = 0, y + row_height, 0
        placed.append({"id": index, **panel, "gridPos": {"h": h, "w": w, "x": x, "y": y}})
        x, row_height = x + w, max(row_height, h)
    return placed


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    variables: Sequence[JSON],
    annotations: Sequence[JSON],
    panels: Sequence[JSON],
) -> JSON:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["elastic-autoscaler", "pytorch"],
        "editable": True,
        "graphTooltip": 1,  # a shared crosshair: one instant across every panel
        "timezone": "browser",
        "time": {"from": "now-3h", "to": "now"},
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "links": [],
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": [BUILT_IN_ANNOTATIONS, *annotations]},
        "panels": _placed(panels),
    }


# -- the dashboards ------------------------------------------------------------------------------


def scaling_decisions(m: EngineMetrics | None = None) -> JSON:
    """What the engine decided and why: every job's replicas against its bounds, the reasons,
    throughput observed against predicted, the capacity, the objective and the policy itself."""
    m = m or engine_metrics()
    on = ON_INSTANCE
    reason, result = label(m.decisions, "reason"), label(m.writes, "result")
    resource, fallback = label(m.capacity, "resource"), label(m.fallbacks, "reason")
    rounds_by = label(m.rounds, "result")
    label(m.capacity_used, resource)  # both capacity gauges share the label
    job_legend = f"{{{{{LABEL_NAMESPACE}}}}}/{{{{{LABEL_JOB}}}}}"
    desired = _job_series(m.desired)
    training = _select(
        contract.SAMPLES_TOTAL,
        _matches(contract.LABEL_NAMESPACE, "namespace"),
        _matches(contract.LABEL_JOB_NAME, "job"),
    )
    decisions = _select(series(m.decisions), on)
    fallbacks = _select(series(m.fallbacks), on)
    writes = _select(series(m.writes), on)
    written = _select(series(m.writes), on, f'{result}="written"')
    unavailable = _select(series(m.metrics_unavailable), on)
    used_by = f"sum by ({resource}) ({_select(series(m.capacity_used), on)})"
    available_by = f"sum by ({resource}) ({_select(series(m.capacity), on)})"
    panels = [
        stat(
            "Engine leader",
            "Which engine replica holds the lease (only the leader decides).",
            [_target(_select(series(m.leader), on), "{{instance}}")],
            unit="none",
            mappings=_leader_mappings(),
        ),
        stat(
            "Jobs sized",
            "Elastic jobs the engine sized in its last round.",
            [_target(f"count({desired})", "jobs")],
            unit="none",
            no_value="0",
        ),
        stat(
            "Rescales",
            "Worker counts written through /scale in the time range.",
            [_target(f"sum(increase({written}[$__range]))", "rescales")],
            unit="none",
            no_value="0",
        ),
        stat(
            "Policy fallbacks",
            "Rounds in the time range that kept every count because the policy failed.",
            [_target(f"sum(increase({fallbacks}[$__range]))", "fallbacks")],
            unit="none",
            warn_from=1,
            no_value="0",
        ),
        stat(
            "Readings missing",
            "Job throughput readings missing or invalid in the time range (jobs held).",
            [_target(f"sum(increase({unavailable}[$__range]))", "missing")],
            unit="none",
            warn_from=1,
        ),
        stat(
            "Capacity used",
            "Share of each resource the engine may hand out that its jobs hold.",
            [_target(f"{used_by} / {available_by}", f"{{{{{resource}}}}}")],
            unit="percentunit",
        ),
        timeseries(
            "Replicas",
            "Each job's worker count: desired (the engine's settled count), current (its spec) "
            "and the elasticPolicy bounds (dashed).",
            [
                _target(desired, f"{job_legend} desired"),
                _target(_job_series(m.current), f"{job_legend} current"),
                _target(_job_series(m.minimum), f"{job_legend} min"),
                _target(_job_series(m.maximum), f"{job_legend} max"),
            ],
            unit="none",
            width=WIDTH,
            decimals=0,
            dashed="/ (min|max)$/",
        ),
        timeseries(
            "Decisions by reason",
            "The final reason of every job's decision, per second (one decision per job and "
            "round).",
            [_target(f"sum by ({reason}) ({_rate(decisions)})", f"{{{{{reason}}}}}")],
            unit="cps",
        ),
        timeseries(
            "Scale writes by result",
            "Writes through /scale: written, unchanged (already there) or error.",
            [_target(f"sum by ({result}) ({_rate(writes)})", f"{{{{{result}}}}}")],
            unit="wps",
        ),
        timeseries(
            "Throughput: observed vs predicted",
            "Samples/s the engine read for each job, what its model predicts at the desired "
            "count (dashed), and what the training pods report (their counter's rate).",
            [
                _target(_job_series(m.observed), f"{job_legend} observed"),
                _target(_job_series(m.predicted), f"{job_legend} predicted"),
                _target(
                    f"sum by ({contract.LABEL_NAMESPACE}, {contract.LABEL_JOB_NAME}) "
                    f"({_rate(training)})",
                    f"{{{{{contract.LABEL_NAMESPACE}}}}}/{{{{{contract.LABEL_JOB_NAME}}}}} "
                    "reported",
                ),
            ],
            unit="suffix: samples/s",
            width=WIDTH,
            dashed="/ predicted$/",
        ),
        timeseries(
            "Capacity: available vs used",
            "Resources the engine may hand out (dashed) and what its jobs hold after each round.",
            [
                _target(available_by, f"{{{{{resource}}}}} available"),
                _target(used_by, f"{{{{{resource}}}}} used"),
            ],
            unit="none",
            dashed="/ available$/",
        ),
        timeseries(
            "Objective value",
            "The policy's objective at the settled counts (higher is better).",
            [_target(f"max({_select(series(m.objective), on)})", "objective")],
            unit="none",
        ),
        timeseries(
            "Policy solve time",
            "Time the policy took to decide, quantiles over the rounds.",
            _quantiles(m.solve_seconds, on),
            unit="s",
        ),
        timeseries(
            "Rounds by result",
            "Decision rounds per second: ok, or fallback (every count kept).",
            [
                _target(
                    f"sum by ({rounds_by}) ({_rate(_select(series(m.rounds), on))})",
                    f"{{{{{rounds_by}}}}}",
                )
            ],
            unit="cps",
        ),
        timeseries(
            "Policy fallbacks by reason",
            "Rounds that kept every count: the policy failed, overran its budget, returned "
            "something invalid or was still running.",
            [_target(f"sum by ({fallback}) ({_rate(fallbacks)})", f"{{{{{fallback}}}}}")],
            unit="cps",
            no_value="0",
        ),
        timeseries(
            "Throughput unavailable",
            "Job readings missing or invalid per second; such jobs keep their count.",
            [_target(f"sum({_rate(unavailable)})", "missing")],
            unit="cps",
        ),
    ]
    new_reason = (
        f"sum by ({reason}) (increase({decisions}[$__rate_interval])) > 0 unless "
        f"sum by ({reason}) (increase({decisions}[$__rate_interval] offset $__rate_interval)) > 0"
    )
    return dashboard(
        uid="autoscaler-scaling-decisions",
        title="Elastic autoscaler: scaling decisions",
        description="What the engine decided for each elastic PyTorchJob, and why.",
        variables=[
            query_variable("instance", "Engine", series(m.leader), INSTANCE),
            query_variable(
                "namespace", "Namespace", series(m.desired), LABEL_NAMESPACE, ON_INSTANCE
            ),
            query_variable(
                "job",
                "PyTorchJob",
                series(m.desired),
                LABEL_JOB,
                ON_INSTANCE,
                _matches(LABEL_NAMESPACE, "namespace"),
            ),
        ],
        annotations=[
            annotation(
                "Rescales",
                f"changes({desired}[$__rate_interval]) > 0",
                title=f"{job_legend} rescaled",
                text="the engine's desired worker count changed",
                tags=[LABEL_NAMESPACE, LABEL_JOB],
                color="blue",
            ),
            annotation(
                "Decision reasons",
                new_reason,
                title=f"{{{{{reason}}}}}",
                text="decisions with this reason began",
                tags=[reason],
                color="purple",
            ),
            annotation(
                "Policy fallbacks",
                f"sum by ({fallback}) (increase({fallbacks}[$__rate_interval])) > 0",
                title=f"{{{{{fallback}}}}}",
                text="the policy failed: every count was kept",
                tags=[fallback],
                color="red",
            ),
        ],
        panels=panels,
    )


def operator_health(m: OperatorMetrics | None = None) -> JSON:
    """Is the operator keeping up: reconciles, errors, latency, its queue and its API calls."""
    m = m or operator_metrics()
    on = ON_INSTANCE
    result = label(m.reconciles, "result")
    reconciles = _select(series(m.reconciles), on)
    errors = _select(series(m.reconcile_errors), on)
    depth = _select(series(m.queue_depth), on)
    panels = [
        stat(
            "Operator leader",
            "Which operator replica holds the lease (only the leader reconciles).",
            [_target(_select(series(m.leader), on), "{{instance}}")],
            unit="none",
            width=6,
            mappings=_leader_mappings(),
        ),
        stat(
            "Reconciles",
            "Reconcile passes per second.",
            [_target(f"sum({_rate(reconciles)})", "reconciles")],
            unit="ops",
            width=6,
        ),
        stat(
            "Reconcile error ratio",
            "Share of reconcile passes that failed.",
            [_target(f"sum({_rate(errors)}) / sum({_rate(reconciles)})", "errors")],
            unit="percentunit",
            width=6,
            warn_from=0.05,
        ),
        stat(
            "Work-queue depth",
            "Jobs waiting to be reconciled.",
            [_target(f"sum({depth})", "depth")],
            unit="none",
            width=6,
            warn_from=100,
        ),
        timeseries(
            "Reconciles by result",
            "Reconcile passes per second, ok or error.",
            [_target(f"sum by ({result}) ({_rate(reconciles)})", f"{{{{{result}}}}}")],
            unit="ops",
        ),
        timeseries(
            "Reconcile errors",
            "Failed reconcile passes per second (each is retried with backoff).",
            [_target(f"sum({_rate(errors)})", "errors")],
            unit="ops",
        ),
        timeseries(
            "Reconcile duration",
            "Time of one reconcile pass, its writes included: quantiles.",
            _quantiles(m.reconcile_seconds, on),
            unit="s",
        ),
        timeseries(
            "Work-queue depth by replica",
            "Jobs waiting to be reconciled, per operator replica.",
            [_target(depth, "{{instance}}")],
            unit="none",
            decimals=0,
        ),
        timeseries(
            "API server requests and writes",
            "Requests the operator sends to the API server per second, and the writes among "
            "them (both are running totals).",
            [
                _target(f"sum({_rate(_select(series(m.api_requests), on))})", "requests"),
                _target(f"sum({_rate(_select(series(m.api_writes), on))})", "writes"),
            ],
            unit="reqps",
            width=WIDTH,
        ),
    ]
    return dashboard(
        uid="autoscaler-operator-health",
        title="Elastic autoscaler: operator health",
        description="Whether the PyTorchJob operator keeps up with its jobs.",
        variables=[query_variable("instance", "Operator", series(m.leader), INSTANCE)],
        annotations=[],
        panels=panels,
    )


# -- files ---------------------------------------------------------------------------------------

DASHBOARDS: Final[dict[str, Callable[[], JSON]]] = {
    "scaling-decisions": scaling_decisions,
    "operator-health": operator_health,
}


def render(board: JSON) -> str:
    return json.dumps(board, indent=2) + "\n"


def _configmap(name: str, text: str) -> str:
    body = "".join(f"    {line}\n" if line else "\n" for line in text.splitlines())
    return (
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        f"  name: autoscaler-dashboard-{name}\n"
        f"  namespace: {NAMESPACE}\n"
        "  labels:\n"
        f'    {SIDECAR_LABEL}: "1"\n'
        "    app.kubernetes.io/component: monitoring\n"
        "    app.kubernetes.io/part-of: elastic-autoscaler\n"
        "data:\n"
        f"  {name}.json: |\n"
        f"{body}"
    )


def files() -> dict[str, str]:
    """deploy/grafana by file name: each dashboard's JSON, their ConfigMaps, the kustomization."""
    rendered = {name: render(build()) for name, build in DASHBOARDS.items()}
    header = (
        "# Generated by `make dashboards` (autoscaler/observability/dashboards.py): do not edit.\n"
        "# Grafana's dashboard sidecar loads ConfigMaps labelled grafana_dashboard=1 (let it\n"
        f"# search the {NAMESPACE} namespace, or all of them).\n"
    )
    configmaps = "---\n".join(_configmap(name, text) for name, text in rendered.items())
    kustomization = (
        "# Generated by `make dashboards`: the Grafana dashboards as ConfigMaps (deploy/ lists\n"
        "# this directory; `kubectl apply -k deploy/grafana` installs them alone).\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"namespace: {NAMESPACE}\n"
        "resources:\n"
        "  - dashboards.yaml\n"
    )
    return {
        **{f"{name}.json": text for name, text in rendered.items()},
        "dashboards.yaml": header + configmaps,
        "kustomization.yaml": kustomization,
    }


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autoscaler.observability.dashboards",
        description="write the Grafana dashboards and their ConfigMaps into a directory",
    )
    parser.add_argument("directory", type=Path, help="e.g. deploy/grafana")
    args = parser.parse_args(argv)
    for path in write(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
