"""Grafana dashboards for the engine and the operator, generated from code with Grafana's typed
SDK, grafana-foundation-sdk (its builders and models for Grafana 11.6).

Needs that SDK, which only the `test` extra installs (pyproject.toml; `make` installs it into
.venv from requirements-dev.lock): the image's requirements.lock leaves it out, so there this
module does not import.

`python -m autoscaler.observability.dashboards deploy/grafana` (`make dashboards`) writes
`scaling-decisions.json` and `operator-health.json` (for Grafana's "Import dashboard"), the same
JSON in ConfigMaps labelled `grafana_dashboard: "1"` for Grafana's dashboard sidecar
(`dashboards.yaml`), and the `kustomization.yaml` listing them.

No metric name is spelled here: every query names its series through the metric objects of
`engine_metrics()` and `operator_metrics()` (and `metrics_contract` for the training counter),
and every label it groups or filters by is checked against the metric's own label names
(`promql`). A renamed metric therefore changes the generated files: tests/unit/test_dashboards.py
fails until they are regenerated, and tests/integration/test_dashboards.py runs every query
against a real Prometheus fed by the real engine and operator.

Queries use Grafana's variables: `$namespace`, `$job` and `$instance` (the dashboards' own,
multi-select with All) and `$__rate_interval`/`$__range` (Grafana's). Annotations look back
`$__rate_interval` (not `$__interval`): windows that overlap by a scrape never miss a change
that falls between two steps.

Only `make dashboards` and the tests import this module (the operator and the engine never do;
an import contract in pyproject.toml keeps `autoscaler.cli` from importing it or the SDK), which
is why the SDK is a test dependency, not a runtime one.
"""

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models
from prometheus_client.metrics import MetricWrapperBase

from autoscaler import metrics_contract as contract
from autoscaler.observability import promql as q
from autoscaler.observability.engine_metrics import EngineMetrics, engine_metrics
from autoscaler.observability.metrics import OperatorMetrics, operator_metrics

JSON = dict[str, Any]
NAMESPACE: Final = "elastic-autoscaler"  # where deploy/ puts the ConfigMaps
SIDECAR_LABEL: Final = "grafana_dashboard"  # the label Grafana's dashboard sidecar looks for
LABEL_NAMESPACE, LABEL_JOB = q.LABEL_NAMESPACE, q.LABEL_JOB
TAGS: Final = ("elastic-autoscaler", "pytorch")
DATASOURCE_VARIABLE: Final = "datasource"
REFS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WIDTH: Final = 24  # Grafana's grid
TIMESERIES_HEIGHT, STAT_HEIGHT = 8, 4
# Options Grafana's Prometheus data source reads from an annotation query to title, describe and
# tag each mark; the SDK's AnnotationQuery (Grafana's dashboard schema) has no field for them.
PROMETHEUS_ANNOTATION_OPTIONS: Final = ("titleFormat", "textFormat", "tagKeys")


def datasource() -> models.DataSourceRef:
    """Every query's data source: the one chosen in the dashboard's `datasource` variable."""
    return models.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")


# -- queries, panels -----------------------------------------------------------------------------


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


# -- variables, annotations, the dashboard -------------------------------------------------------


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


# -- the dashboards ------------------------------------------------------------------------------


def goodput_panels(m: EngineMetrics, job_legend: str) -> list[timeseries.Panel | stat.Panel]:
    """The jobs sized by goodput: the goodput priced at the desired count, that batch's
    efficiency, and the batch against the job's own gradient noise scale."""
    noise = q.select(
        contract.GRADIENT_NOISE_SCALE,
        q.matches(contract.LABEL_NAMESPACE, "namespace"),
        q.matches(contract.LABEL_JOB_NAME, "job"),
    )
    reported = f"{{{{{contract.LABEL_NAMESPACE}}}}}/{{{{{contract.LABEL_JOB_NAME}}}}}"
    return [
        timeseries_panel(
            "Goodput priced",
            "Goodput the engine priced each goodput job at, at its desired count: throughput x"
            " statistical efficiency of the best batch there, in samples at the job's base"
            " batch per second (the unit its remaining work is counted in).",
            [target(q.job_series(m.goodput), f"{job_legend} goodput")],
            unit="suffix: samples@B0/s",
            width=8,
        ),
        timeseries_panel(
            "Statistical efficiency",
            "Efficiency (noise scale + base batch) / (noise scale + batch) of the batch priced at"
            " each goodput job's desired count: 1 at the base batch.",
            [target(q.job_series(m.efficiency), f"{job_legend} efficiency")],
            unit="percentunit",
            width=8,
        ),
        timeseries_panel(
            "Batch priced vs noise scale",
            "The global batch priced at each goodput job's desired count, and the gradient noise"
            " scale the job reports (dashed): batches past the noise scale lose efficiency.",
            [
                target(q.job_series(m.global_batch), f"{job_legend} batch"),
                target(
                    f"max by ({contract.LABEL_NAMESPACE}, {contract.LABEL_JOB_NAME}) ({noise})",
                    f"{reported} noise scale",
                ),
            ],
            unit="none",
            width=8,
            dashed="/ noise scale$/",
        ),
    ]


def scaling_decisions(m: EngineMetrics | None = None) -> JSON:
    """What the engine decided and why: every job's replicas against its bounds, the reasons,
    throughput observed against predicted, the capacity, the objective and the policy itself."""
    m = m or engine_metrics()
    on = q.ON_INSTANCE
    reason, result = q.label(m.decisions, "reason"), q.label(m.writes, "result")
    resource, fallback = q.label(m.capacity, "resource"), q.label(m.fallbacks, "reason")
    rounds_by = q.label(m.rounds, "result")
    q.label(m.capacity_used, resource)  # both capacity gauges share the label
    job_legend = f"{{{{{LABEL_NAMESPACE}}}}}/{{{{{LABEL_JOB}}}}}"
    desired = q.job_series(m.desired)
    training = q.select(
        contract.SAMPLES_TOTAL,
        q.matches(contract.LABEL_NAMESPACE, "namespace"),
        q.matches(contract.LABEL_JOB_NAME, "job"),
    )
    decisions = q.select(q.series(m.decisions), on)
    fallbacks = q.select(q.series(m.fallbacks), on)
    replaced_by = q.label(m.worker_replacements, "reason")
    replacements = q.select(q.series(m.worker_replacements), on)
    writes = q.select(q.series(m.writes), on)
    written = q.select(q.series(m.writes), on, f'{result}="written"')
    unavailable = q.select(q.series(m.metrics_unavailable), on)
    action, queued_reason = q.label(m.queueing, "action"), q.label(m.queueing, "reason")
    queueing = q.select(q.series(m.queueing), on)
    used_by = f"sum by ({resource}) ({q.select(q.series(m.capacity_used), on)})"
    available_by = f"sum by ({resource}) ({q.select(q.series(m.capacity), on)})"
    panels: list[timeseries.Panel | stat.Panel] = [
        stat_panel(
            "Engine leader",
            "Which engine replica holds the lease (only the leader decides).",
            [target(q.select(q.series(m.leader), on), "{{instance}}")],
            unit="none",
            mappings=leader_mappings(),
        ),
        stat_panel(
            "Jobs sized",
            "Elastic jobs the engine sized in its last round.",
            [target(f"count({desired})", "jobs")],
            unit="none",
            no_value="0",
        ),
        stat_panel(
            "Rescales",
            "Worker counts written through /scale in the time range.",
            [target(f"sum(increase({written}[$__range]))", "rescales")],
            unit="none",
            no_value="0",
        ),
        stat_panel(
            "Policy fallbacks",
            "Rounds in the time range that kept every count because the policy failed.",
            [target(f"sum(increase({fallbacks}[$__range]))", "fallbacks")],
            unit="none",
            warn_from=1,
            no_value="0",
        ),
        stat_panel(
            "Readings missing",
            "Job throughput readings missing or invalid in the time range (jobs held).",
            [target(f"sum(increase({unavailable}[$__range]))", "missing")],
            unit="none",
            warn_from=1,
        ),
        stat_panel(
            "Capacity used",
            "Share of each resource the engine may hand out that its jobs hold.",
            [target(f"{used_by} / {available_by}", f"{{{{{resource}}}}}")],
            unit="percentunit",
        ),
        timeseries_panel(
            "Replicas",
            "Each job's worker count: desired (the engine's settled count), current (its spec) "
            "and the elasticPolicy bounds (dashed).",
            [
                target(desired, f"{job_legend} desired"),
                target(q.job_series(m.current), f"{job_legend} current"),
                target(q.job_series(m.minimum), f"{job_legend} min"),
                target(q.job_series(m.maximum), f"{job_legend} max"),
            ],
            unit="none",
            width=WIDTH,
            decimals=0,
            dashed="/ (min|max)$/",
        ),
        timeseries_panel(
            "Decisions by reason",
            "The final reason of every job's decision, per second (one decision per job and "
            "round).",
            [target(f"sum by ({reason}) ({q.rate(decisions)})", f"{{{{{reason}}}}}")],
            unit="cps",
        ),
        timeseries_panel(
            "Scale writes by result",
            "Writes through /scale: written, unchanged (already there) or error.",
            [target(f"sum by ({result}) ({q.rate(writes)})", f"{{{{{result}}}}}")],
            unit="wps",
        ),
        timeseries_panel(
            "Held back and resumed",
            "Preemptible jobs the engine suspended and resumed, by action and reason (HeldTooLong:"
            " the starvation bound), in each interval.",
            [
                target(
                    f"sum by ({action}, {queued_reason}) (increase({queueing}[$__interval]))",
                    f"{{{{{action}}}}} {{{{{queued_reason}}}}}",
                )
            ],
            unit="none",
            width=WIDTH,
        ),
        timeseries_panel(
            "Throughput: observed vs predicted",
            "Samples/s the engine read for each job, what its model predicts at the desired "
            "count (dashed), and what the training pods report (their counter's rate).",
            [
                target(q.job_series(m.observed), f"{job_legend} observed"),
                target(q.job_series(m.predicted), f"{job_legend} predicted"),
                target(
                    f"sum by ({contract.LABEL_NAMESPACE}, {contract.LABEL_JOB_NAME}) "
                    f"({q.rate(training)})",
                    f"{{{{{contract.LABEL_NAMESPACE}}}}}/{{{{{contract.LABEL_JOB_NAME}}}}} "
                    "reported",
                ),
            ],
            unit="suffix: samples/s",
            width=WIDTH,
            dashed="/ predicted$/",
        ),
        *goodput_panels(m, job_legend),
        timeseries_panel(
            "Capacity: available vs used",
            "Resources the engine may hand out (dashed) and what its jobs hold after each round.",
            [
                target(available_by, f"{{{{{resource}}}}} available"),
                target(used_by, f"{{{{{resource}}}}} used"),
            ],
            unit="none",
            dashed="/ available$/",
        ),
        timeseries_panel(
            "Objective value",
            "The policy's objective at the settled counts (higher is better).",
            [target(f"max({q.select(q.series(m.objective), on)})", "objective")],
            unit="none",
        ),
        timeseries_panel(
            "Policy solve time",
            "Time the policy took to decide, quantiles over the rounds.",
            quantile_targets(m.solve_seconds, on),
            unit="s",
        ),
        timeseries_panel(
            "Rounds by result",
            "Decision rounds per second: ok, or fallback (every count kept).",
            [
                target(
                    f"sum by ({rounds_by}) ({q.rate(q.select(q.series(m.rounds), on))})",
                    f"{{{{{rounds_by}}}}}",
                )
            ],
            unit="cps",
        ),
        timeseries_panel(
            "Policy fallbacks by reason",
            "Rounds that kept every count: the policy failed, overran its budget, returned "
            "something invalid or was still running.",
            [target(f"sum by ({fallback}) ({q.rate(fallbacks)})", f"{{{{{fallback}}}}}")],
            unit="cps",
            no_value="0",
        ),
        timeseries_panel(
            "Policy workers replaced by reason",
            "Policy worker processes killed and replaced: over their time budget, over their "
            "memory limit (also a leak recycled after a good answer), or dead.",
            [target(f"sum by ({replaced_by}) ({q.rate(replacements)})", f"{{{{{replaced_by}}}}}")],
            unit="cps",
            no_value="0",
        ),
        timeseries_panel(
            "Throughput unavailable",
            "Job readings missing or invalid per second; such jobs keep their count.",
            [target(f"sum({q.rate(unavailable)})", "missing")],
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
            query_variable("instance", "Engine", q.series(m.leader), q.INSTANCE),
            query_variable(
                "namespace", "Namespace", q.series(m.desired), LABEL_NAMESPACE, q.ON_INSTANCE
            ),
            query_variable(
                "job",
                "PyTorchJob",
                q.series(m.desired),
                LABEL_JOB,
                q.ON_INSTANCE,
                q.matches(LABEL_NAMESPACE, "namespace"),
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
    on = q.ON_INSTANCE
    result = q.label(m.reconciles, "result")
    reconciles = q.select(q.series(m.reconciles), on)
    errors = q.select(q.series(m.reconcile_errors), on)
    depth = q.select(q.series(m.queue_depth), on)
    panels: list[timeseries.Panel | stat.Panel] = [
        stat_panel(
            "Operator leader",
            "Which operator replica holds the lease (only the leader reconciles).",
            [target(q.select(q.series(m.leader), on), "{{instance}}")],
            unit="none",
            width=6,
            mappings=leader_mappings(),
        ),
        stat_panel(
            "Reconciles",
            "Reconcile passes per second.",
            [target(f"sum({q.rate(reconciles)})", "reconciles")],
            unit="ops",
            width=6,
        ),
        stat_panel(
            "Reconcile error ratio",
            "Share of reconcile passes that failed.",
            [target(f"sum({q.rate(errors)}) / sum({q.rate(reconciles)})", "errors")],
            unit="percentunit",
            width=6,
            warn_from=0.05,
        ),
        stat_panel(
            "Work-queue depth",
            "Jobs waiting to be reconciled.",
            [target(f"sum({depth})", "depth")],
            unit="none",
            width=6,
            warn_from=100,
        ),
        timeseries_panel(
            "Reconciles by result",
            "Reconcile passes per second, ok or error.",
            [target(f"sum by ({result}) ({q.rate(reconciles)})", f"{{{{{result}}}}}")],
            unit="ops",
        ),
        timeseries_panel(
            "Reconcile errors",
            "Failed reconcile passes per second (each is retried with backoff).",
            [target(f"sum({q.rate(errors)})", "errors")],
            unit="ops",
        ),
        timeseries_panel(
            "Reconcile duration",
            "Time of one reconcile pass, its writes included: quantiles.",
            quantile_targets(m.reconcile_seconds, on),
            unit="s",
        ),
        timeseries_panel(
            "Work-queue depth by replica",
            "Jobs waiting to be reconciled, per operator replica.",
            [target(depth, "{{instance}}")],
            unit="none",
            decimals=0,
        ),
        timeseries_panel(
            "API server requests and writes",
            "Requests the operator sends to the API server per second, and the writes among "
            "them (both are running totals).",
            [
                target(f"sum({q.rate(q.select(q.series(m.api_requests), on))})", "requests"),
                target(f"sum({q.rate(q.select(q.series(m.api_writes), on))})", "writes"),
            ],
            unit="reqps",
            width=WIDTH,
        ),
        timeseries_panel(
            "Jobs created, finished, restarted and deleted",
            "Upstream's job counters (training_operator_jobs_*_total), per minute. A counter "
            "has no series before its first event, shown as 0 rather than as no data.",
            [
                target(f"sum({q.rate(q.select(q.series(counter), on))}) * 60 or vector(0)", what)
                for what, counter in m.jobs.items()
            ],
            unit="none",
            width=WIDTH,
        ),
        timeseries_panel(
            "Pods, services and PodGroups written",
            "Upstream's object counters (created_pods_total and the rest), per minute: pods "
            "created, deleted (by anyone) and seen failed; service creates taken and refused; "
            "PodGroups created and deleted.",
            [
                target(f"sum({q.rate(q.select(q.series(counter), on))}) * 60", name)
                for name, counter in m.objects.items()
            ],
            unit="none",
            width=WIDTH,
        ),
    ]
    return dashboard(
        uid="autoscaler-operator-health",
        title="Elastic autoscaler: operator health",
        description="Whether the PyTorchJob operator keeps up with its jobs.",
        variables=[query_variable("instance", "Operator", q.series(m.leader), q.INSTANCE)],
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
