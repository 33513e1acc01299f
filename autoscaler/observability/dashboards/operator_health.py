"""The operator-health dashboard: whether the PyTorchJob operator keeps up with its jobs (its
reconciles, errors, latency, work queue and API server calls)."""

from grafana_foundation_sdk.builders import stat, timeseries

from autoscaler.observability import promql as q
from autoscaler.observability.dashboards.board import JSON, dashboard, query_variable
from autoscaler.observability.dashboards.panels import (
    WIDTH,
    leader_mappings,
    quantile_targets,
    stat_panel,
    target,
    timeseries_panel,
)
from autoscaler.observability.metrics import OperatorMetrics, operator_metrics


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
            "Planned placement",
            "The planned placement: workers held by its gate until they pack, and workers "
            "pinned to a node and deleted to move, per minute.",
            [
                target(f"sum({q.select(q.series(m.waiting_workers), on)})", "waiting"),
                target(f"sum({q.rate(q.select(q.series(m.placed_workers), on))}) * 60", "placed"),
                target(f"sum({q.rate(q.select(q.series(m.moved_workers), on))}) * 60", "moved"),
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
