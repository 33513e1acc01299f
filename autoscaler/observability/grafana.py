"""Building blocks of Grafana dashboards as plain JSON: series names from metric objects,
PromQL selections with the dashboards' variables, panels, variables, annotations, layout."""

from collections.abc import Sequence
from typing import Any, Final

from prometheus_client.metrics import MetricWrapperBase

from autoscaler.observability.engine_metrics import JOB_LABELS

JSON = dict[str, Any]
SCHEMA_VERSION: Final = 39
DATASOURCE: Final[JSON] = {"type": "prometheus", "uid": "${datasource}"}
INSTANCE: Final = "instance"  # Prometheus' target label: one engine or operator replica
QUANTILES: Final = (0.5, 0.9, 0.99)
REFS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WIDTH: Final = 24  # Grafana's grid

LABEL_NAMESPACE, LABEL_JOB = JOB_LABELS  # the engine's per-job labels


# -- metric names, from the metric objects -------------------------------------------------------


def described(metric: MetricWrapperBase) -> tuple[str, str]:
    (described,) = metric.describe()
    return described.name, described.type


def series(metric: MetricWrapperBase) -> str:
    """The series a query selects: a gauge's name, a counter's `_total`."""
    name, kind = described(metric)
    if kind == "counter":
        return f"{name}_total"
    if kind == "gauge":
        return name
    raise ValueError(f"{name} is a {kind}: select its buckets with `buckets`")


def buckets(metric: MetricWrapperBase) -> str:
    name, kind = described(metric)
    if kind != "histogram":
        raise ValueError(f"{name} is a {kind}, not a histogram")
    return f"{name}_bucket"


def label(metric: MetricWrapperBase, name: str) -> str:
    """`name`, once checked to be one of the metric's labels."""
    names: tuple[str, ...] = metric._labelnames
    if name not in names:
        raise ValueError(f"{described(metric)[0]} has no label {name!r} (only {names})")
    return name


def select(name: str, *matchers: str) -> str:
    return f"{name}{{{', '.join(matchers)}}}" if matchers else name


def matches(labelname: str, variable: str) -> str:
    return f'{labelname}=~"${variable}"'


ON_INSTANCE: Final = matches(INSTANCE, "instance")


def job_series(metric: MetricWrapperBase) -> str:
    """A per-job engine series, filtered by the dashboard's namespace, job and instance."""
    return select(
        series(metric),
        matches(label(metric, LABEL_NAMESPACE), "namespace"),
        matches(label(metric, LABEL_JOB), "job"),
        ON_INSTANCE,
    )


def rate(selected: str, window: str = "$__rate_interval") -> str:
    return f"rate({selected}[{window}])"


def quantiles(metric: MetricWrapperBase, *matchers: str) -> list[JSON]:
    buckets_rate = rate(select(buckets(metric), *matchers))
    return [
        target(f"histogram_quantile({q:g}, sum by (le) ({buckets_rate}))", f"p{round(q * 100)}")
        for q in QUANTILES
    ]


# -- panels, variables, annotations --------------------------------------------------------------


def target(expr: str, legend: str) -> JSON:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "range": True}


def panel(kind: str, title: str, description: str, targets: Sequence[JSON], width: int) -> JSON:
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
        **panel("timeseries", title, description, targets, width),
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
        **panel("stat", title, description, targets, width),
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


def leader_mappings() -> list[JSON]:
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
    query = f"label_values({select(metric, *matchers)}, {labelname})"
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


def placed(panels: Sequence[JSON]) -> list[JSON]:
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
        "panels": placed(panels),
    }


# -- the dashboards ------------------------------------------------------------------------------
