"""A dashboard around its panels: the data source and query variables, the annotations
(Prometheus' options included) and the dashboard's JSON with its panels numbered in order."""

import json
from collections.abc import Sequence
from typing import Any, Final

from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as models

from autoscaler.observability import promql as q
from autoscaler.observability.dashboards.panels import DATASOURCE_VARIABLE, datasource

JSON = dict[str, Any]
TAGS: Final = ("elastic-autoscaler", "pytorch")
# Options Grafana's Prometheus data source reads from an annotation query to title, describe and
# tag each mark; the SDK's AnnotationQuery (Grafana's dashboard schema) has no field for them.
PROMETHEUS_ANNOTATION_OPTIONS: Final = ("titleFormat", "textFormat", "tagKeys")


def datasource_variable() -> builders.DatasourceVariable:
    return (
        builders.DatasourceVariable(DATASOURCE_VARIABLE)
        .label("Data source")
        .type("prometheus")
        .hide(models.VariableHide.DONT_HIDE)
        .multi(False)
        .include_all(False)
        .regex("")
    )


def query_variable(
    name: str, title: str, metric: str, labelname: str, *matchers: str
) -> builders.QueryVariable:
    """A multi-select variable (with All) of `labelname`'s values on `metric`'s series."""
    return (
        builders.QueryVariable(name)
        .label(title)
        .datasource(datasource())
        .query(f"label_values({q.select(metric, *matchers)}, {labelname})")
        .current(models.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .hide(models.VariableHide.DONT_HIDE)
        .include_all(True)
        .all_value(".*")
        .multi(True)
        .options([])
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)  # jobs come and go
        .regex("")
        .sort(models.VariableSort.ALPHABETICAL_ASC)
    )


class PrometheusAnnotationQuery(models.AnnotationQuery):
    """The SDK's annotation query plus PROMETHEUS_ANNOTATION_OPTIONS (Grafana splits tagKeys
    at commas)."""

    def __init__(self, *, title_format: str, text_format: str, tag_keys: Sequence[str]) -> None:
        super().__init__()
        self.options = dict(
            zip(
                PROMETHEUS_ANNOTATION_OPTIONS,
                (title_format, text_format, ",".join(tag_keys)),
                strict=True,
            )
        )

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), **self.options}


class PrometheusAnnotation(builders.AnnotationQuery):
    """The SDK's annotation builder, building a PrometheusAnnotationQuery."""

    def __init__(self, *, title_format: str, text_format: str, tag_keys: Sequence[str]) -> None:
        super().__init__()
        self._internal = PrometheusAnnotationQuery(
            title_format=title_format, text_format=text_format, tag_keys=tag_keys
        )


def annotation(
    name: str, expr: str, *, title: str, text: str, tags: Sequence[str], color: str
) -> PrometheusAnnotation:
    """A Prometheus annotation: a mark wherever `expr` has a value (title and tags from labels)."""
    return (
        PrometheusAnnotation(title_format=title, text_format=text, tag_keys=tags)
        .name(name)
        .datasource(datasource())
        .enable(True)
        .hide(False)
        .icon_color(color)
        .expr(expr)
    )


def built_in_annotations() -> builders.AnnotationQuery:
    """Grafana's own annotations and alerts, which it adds to a dashboard that lacks them."""
    return (
        builders.AnnotationQuery()
        .name("Annotations & Alerts")
        .datasource(models.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)")
        .type("dashboard")
        .built_in(1)
    )


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    variables: Sequence[builders.QueryVariable],
    annotations: Sequence[Builder[models.AnnotationQuery]],
    panels: Sequence[timeseries.Panel | stat.Panel],
) -> JSON:
    """The dashboard as JSON, its panels numbered in order. The SDK places them left to right
    and starts a new row once one is full: the widths of each row add up to WIDTH."""
    built = (
        builders.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(list(TAGS))
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)  # one instant across every panel
        .timezone("browser")
        .time("now-3h", "now")
        .refresh("30s")
        .version(1)
        .links([])
        .variables([datasource_variable(), *variables])
        .annotations([built_in_annotations(), *annotations])
    )
    for number, each in enumerate(panels, start=1):
        built.with_panel(each.id(number))
    as_json: JSON = json.loads(json.dumps(built.build(), cls=JSONEncoder))
    return as_json
