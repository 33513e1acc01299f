"""The panels of a dashboard: their Prometheus queries, each on the dashboard's chosen data
source, and the time series and stat panels every board is made of."""

from collections.abc import Sequence
from typing import Final, TypeVar

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models
from prometheus_client.metrics import MetricWrapperBase

from autoscaler.observability import promql as q

DATASOURCE_VARIABLE: Final = "datasource"
REFS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WIDTH: Final = 24  # Grafana's grid
TIMESERIES_HEIGHT, STAT_HEIGHT = 8, 4


def datasource() -> models.DataSourceRef:
    """Every query's data source: the one chosen in the dashboard's `datasource` variable."""
    return models.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")


def target(expr: str, legend: str) -> prometheus.Dataquery:
    """A range query (its refId is set by the panel, in order)."""
    return prometheus.Dataquery().datasource(datasource()).expr(expr).legend_format(legend).range()


def quantile_targets(metric: MetricWrapperBase, *matchers: str) -> list[prometheus.Dataquery]:
    return [target(expr, legend) for expr, legend in q.quantiles(metric, *matchers)]


PanelBuilder = TypeVar("PanelBuilder", timeseries.Panel, stat.Panel)


def panel(
    builder: PanelBuilder,
    title: str,
    description: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    width: int,
    height: int,
) -> PanelBuilder:
    """What every panel has: title, description, data source, queries A, B, ... and size (the
    dashboard places it)."""
    return (
        builder.title(title)
        .description(description)
        .datasource(datasource())
        .targets([t.ref_id(REFS[i]) for i, t in enumerate(targets)])
        .span(width)
        .height(height)
    )


def timeseries_panel(
    title: str,
    description: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    unit: str,
    width: int = 12,
    decimals: int | None = None,
    dashed: str | None = None,
    no_value: str | None = None,
) -> timeseries.Panel:
    """A time series panel; series whose display name matches the regex `dashed` are dashed."""
    built = (
        panel(
            timeseries.Panel(), title, description, targets, width=width, height=TIMESERIES_HEIGHT
        )
        .unit(unit)
        .min(0)
        .color_scheme(builders.FieldColor().mode(models.FieldColorModeId.PALETTE_CLASSIC))
        .draw_style(common.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if decimals is not None:
        built.decimals(decimals)
    if no_value is not None:
        built.no_value(no_value)
    if dashed:
        built.override_by_regexp(
            dashed,
            [
                models.DynamicConfigValue("custom.lineStyle", common.LineStyle("dash", [10, 10])),
                models.DynamicConfigValue("custom.fillOpacity", 0),
            ],
        )
    return built


def stat_panel(
    title: str,
    description: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    unit: str,
    width: int = 4,
    mappings: Sequence[models.ValueMapping] = (),
    warn_from: float | None = None,
    no_value: str | None = None,
) -> stat.Panel:
    """A stat panel of each series' last value; red from `warn_from` on, else green."""
    steps = [models.Threshold(value=None, color="green")]  # None: from -Infinity
    if warn_from is not None:
        steps.append(models.Threshold(value=warn_from, color="red"))
    built = (
        panel(stat.Panel(), title, description, targets, width=width, height=STAT_HEIGHT)
        .unit(unit)
        .mappings(list(mappings))
        .color_scheme(builders.FieldColor().mode(models.FieldColorModeId.THRESHOLDS))
        .thresholds(builders.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE).steps(steps))
        .reduce_options(
            common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
        )
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.AREA)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .orientation(common.VizOrientation.AUTO)
        .text_mode(common.BigValueTextMode.AUTO)
    )
    if no_value is not None:
        built.no_value(no_value)
    return built


def leader_mappings() -> list[models.ValueMapping]:
    return [
        models.ValueMap(
            {
                "0": models.ValueMappingResult(text="standby", color="yellow", index=1),
                "1": models.ValueMappingResult(text="leader", color="green", index=0),
            }
        )
    ]
