"""The scaling-decisions dashboard: what the engine decided for each elastic job and why, its
goodput pricing, the capacity, the objective and the policy's health."""

from grafana_foundation_sdk.builders import stat, timeseries

from autoscaler import metrics_contract as contract
from autoscaler.observability import promql as q
from autoscaler.observability.dashboards.board import JSON, annotation, dashboard, query_variable
from autoscaler.observability.dashboards.panels import (
    WIDTH,
    leader_mappings,
    quantile_targets,
    stat_panel,
    target,
    timeseries_panel,
)
from autoscaler.observability.engine_metrics import EngineMetrics, engine_metrics
from autoscaler.observability.promql import LABEL_JOB, LABEL_NAMESPACE


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
