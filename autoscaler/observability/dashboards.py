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

from autoscaler import metrics_contract as contract
from autoscaler.observability import grafana as g
from autoscaler.observability.engine_metrics import EngineMetrics, engine_metrics
from autoscaler.observability.metrics import OperatorMetrics, operator_metrics

JSON = dict[str, Any]
NAMESPACE: Final = "elastic-autoscaler"  # where deploy/ puts the ConfigMaps
SIDECAR_LABEL: Final = "grafana_dashboard"  # the label Grafana's dashboard sidecar looks for
LABEL_NAMESPACE, LABEL_JOB = g.LABEL_NAMESPACE, g.LABEL_JOB


def scaling_decisions(m: EngineMetrics | None = None) -> JSON:
    """What the engine decided and why: every job's replicas against its bounds, the reasons,
    throughput observed against predicted, the capacity, the objective and the policy itself."""
    m = m or engine_metrics()
    on = g.ON_INSTANCE
    reason, result = g.label(m.decisions, "reason"), g.label(m.writes, "result")
    resource, fallback = g.label(m.capacity, "resource"), g.label(m.fallbacks, "reason")
    rounds_by = g.label(m.rounds, "result")
    g.label(m.capacity_used, resource)  # both capacity gauges share the label
    job_legend = f"{{{{{LABEL_NAMESPACE}}}}}/{{{{{LABEL_JOB}}}}}"
    desired = g.job_series(m.desired)
    training = g.select(
        contract.SAMPLES_TOTAL,
        g.matches(contract.LABEL_NAMESPACE, "namespace"),
        g.matches(contract.LABEL_JOB_NAME, "job"),
    )
    decisions = g.select(g.series(m.decisions), on)
    fallbacks = g.select(g.series(m.fallbacks), on)
    writes = g.select(g.series(m.writes), on)
    written = g.select(g.series(m.writes), on, f'{result}="written"')
    unavailable = g.select(g.series(m.metrics_unavailable), on)
    used_by = f"sum by ({resource}) ({g.select(g.series(m.capacity_used), on)})"
    available_by = f"sum by ({resource}) ({g.select(g.series(m.capacity), on)})"
    panels = [
        g.stat(
            "Engine leader",
            "Which engine replica holds the lease (only the leader decides).",
            [g.target(g.select(g.series(m.leader), on), "{{instance}}")],
            unit="none",
            mappings=g.leader_mappings(),
        ),
        g.stat(
            "Jobs sized",
            "Elastic jobs the engine sized in its last round.",
            [g.target(f"count({desired})", "jobs")],
            unit="none",
            no_value="0",
        ),
        g.stat(
            "Rescales",
            "Worker counts written through /scale in the time range.",
            [g.target(f"sum(increase({written}[$__range]))", "rescales")],
            unit="none",
            no_value="0",
        ),
        g.stat(
            "Policy fallbacks",
            "Rounds in the time range that kept every count because the policy failed.",
            [g.target(f"sum(increase({fallbacks}[$__range]))", "fallbacks")],
            unit="none",
            warn_from=1,
            no_value="0",
        ),
        g.stat(
            "Readings missing",
            "Job throughput readings missing or invalid in the time range (jobs held).",
            [g.target(f"sum(increase({unavailable}[$__range]))", "missing")],
            unit="none",
            warn_from=1,
        ),
        g.stat(
            "Capacity used",
            "Share of each resource the engine may hand out that its jobs hold.",
            [g.target(f"{used_by} / {available_by}", f"{{{{{resource}}}}}")],
            unit="percentunit",
        ),
        g.timeseries(
            "Replicas",
            "Each job's worker count: desired (the engine's settled count), current (its spec) "
            "and the elasticPolicy bounds (dashed).",
            [
                g.target(desired, f"{job_legend} desired"),
                g.target(g.job_series(m.current), f"{job_legend} current"),
                g.target(g.job_series(m.minimum), f"{job_legend} min"),
                g.target(g.job_series(m.maximum), f"{job_legend} max"),
            ],
            unit="none",
            width=g.WIDTH,
            decimals=0,
            dashed="/ (min|max)$/",
        ),
        g.timeseries(
            "Decisions by reason",
            "The final reason of every job's decision, per second (one decision per job and "
            "round).",
            [g.target(f"sum by ({reason}) ({g.rate(decisions)})", f"{{{{{reason}}}}}")],
            unit="cps",
        ),
        g.timeseries(
            "Scale writes by result",
            "Writes through /scale: written, unchanged (already there) or error.",
            [g.target(f"sum by ({result}) ({g.rate(writes)})", f"{{{{{result}}}}}")],
            unit="wps",
        ),
        g.timeseries(
            "Throughput: observed vs predicted",
            "Samples/s the engine read for each job, what its model predicts at the desired "
            "count (dashed), and what the training pods report (their counter's rate).",
            [
                g.target(g.job_series(m.observed), f"{job_legend} observed"),
                g.target(g.job_series(m.predicted), f"{job_legend} predicted"),
                g.target(
                    f"sum by ({contract.LABEL_NAMESPACE}, {contract.LABEL_JOB_NAME}) "
                    f"({g.rate(training)})",
                    f"{{{{{contract.LABEL_NAMESPACE}}}}}/{{{{{contract.LABEL_JOB_NAME}}}}} "
                    "reported",
                ),
            ],
            unit="suffix: samples/s",
            width=g.WIDTH,
            dashed="/ predicted$/",
        ),
        g.timeseries(
            "Capacity: available vs used",
            "Resources the engine may hand out (dashed) and what its jobs hold after each round.",
            [
                g.target(available_by, f"{{{{{resource}}}}} available"),
                g.target(used_by, f"{{{{{resource}}}}} used"),
            ],
            unit="none",
            dashed="/ available$/",
        ),
        g.timeseries(
            "Objective value",
            "The policy's objective at the settled counts (higher is better).",
            [g.target(f"max({g.select(g.series(m.objective), on)})", "objective")],
            unit="none",
        ),
        g.timeseries(
            "Policy solve time",
            "Time the policy took to decide, quantiles over the rounds.",
            g.quantiles(m.solve_seconds, on),
            unit="s",
        ),
        g.timeseries(
            "Rounds by result",
            "Decision rounds per second: ok, or fallback (every count kept).",
            [
                g.target(
                    f"sum by ({rounds_by}) ({g.rate(g.select(g.series(m.rounds), on))})",
                    f"{{{{{rounds_by}}}}}",
                )
            ],
            unit="cps",
        ),
        g.timeseries(
            "Policy fallbacks by reason",
            "Rounds that kept every count: the policy failed, overran its budget, returned "
            "something invalid or was still running.",
            [g.target(f"sum by ({fallback}) ({g.rate(fallbacks)})", f"{{{{{fallback}}}}}")],
            unit="cps",
            no_value="0",
        ),
        g.timeseries(
            "Throughput unavailable",
            "Job readings missing or invalid per second; such jobs keep their count.",
            [g.target(f"sum({g.rate(unavailable)})", "missing")],
            unit="cps",
        ),
    ]
    new_reason = (
        f"sum by ({reason}) (increase({decisions}[$__rate_interval])) > 0 unless "
        f"sum by ({reason}) (increase({decisions}[$__rate_interval] offset $__rate_interval)) > 0"
    )
    return g.dashboard(
        uid="autoscaler-scaling-decisions",
        title="Elastic autoscaler: scaling decisions",
        description="What the engine decided for each elastic PyTorchJob, and why.",
        variables=[
            g.query_variable("instance", "Engine", g.series(m.leader), g.INSTANCE),
            g.query_variable(
                "namespace", "Namespace", g.series(m.desired), LABEL_NAMESPACE, g.ON_INSTANCE
            ),
            g.query_variable(
                "job",
                "PyTorchJob",
                g.series(m.desired),
                LABEL_JOB,
                g.ON_INSTANCE,
                g.matches(LABEL_NAMESPACE, "namespace"),
            ),
        ],
        annotations=[
            g.annotation(
                "Rescales",
                f"changes({desired}[$__rate_interval]) > 0",
                title=f"{job_legend} rescaled",
                text="the engine's desired worker count changed",
                tags=[LABEL_NAMESPACE, LABEL_JOB],
                color="blue",
            ),
            g.annotation(
                "Decision reasons",
                new_reason,
                title=f"{{{{{reason}}}}}",
                text="decisions with this reason began",
                tags=[reason],
                color="purple",
            ),
            g.annotation(
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
    on = g.ON_INSTANCE
    result = g.label(m.reconciles, "result")
    reconciles = g.select(g.series(m.reconciles), on)
    errors = g.select(g.series(m.reconcile_errors), on)
    depth = g.select(g.series(m.queue_depth), on)
    panels = [
        g.stat(
            "Operator leader",
            "Which operator replica holds the lease (only the leader reconciles).",
            [g.target(g.select(g.series(m.leader), on), "{{instance}}")],
            unit="none",
            width=6,
            mappings=g.leader_mappings(),
        ),
        g.stat(
            "Reconciles",
            "Reconcile passes per second.",
            [g.target(f"sum({g.rate(reconciles)})", "reconciles")],
            unit="ops",
            width=6,
        ),
        g.stat(
            "Reconcile error ratio",
            "Share of reconcile passes that failed.",
            [g.target(f"sum({g.rate(errors)}) / sum({g.rate(reconciles)})", "errors")],
            unit="percentunit",
            width=6,
            warn_from=0.05,
        ),
        g.stat(
            "Work-queue depth",
            "Jobs waiting to be reconciled.",
            [g.target(f"sum({depth})", "depth")],
            unit="none",
            width=6,
            warn_from=100,
        ),
        g.timeseries(
            "Reconciles by result",
            "Reconcile passes per second, ok or error.",
            [g.target(f"sum by ({result}) ({g.rate(reconciles)})", f"{{{{{result}}}}}")],
            unit="ops",
        ),
        g.timeseries(
            "Reconcile errors",
            "Failed reconcile passes per second (each is retried with backoff).",
            [g.target(f"sum({g.rate(errors)})", "errors")],
            unit="ops",
        ),
        g.timeseries(
            "Reconcile duration",
            "Time of one reconcile pass, its writes included: quantiles.",
            g.quantiles(m.reconcile_seconds, on),
            unit="s",
        ),
        g.timeseries(
            "Work-queue depth by replica",
            "Jobs waiting to be reconciled, per operator replica.",
            [g.target(depth, "{{instance}}")],
            unit="none",
            decimals=0,
        ),
        g.timeseries(
            "API server requests and writes",
            "Requests the operator sends to the API server per second, and the writes among "
            "them (both are running totals).",
            [
                g.target(f"sum({g.rate(g.select(g.series(m.api_requests), on))})", "requests"),
                g.target(f"sum({g.rate(g.select(g.series(m.api_writes), on))})", "writes"),
            ],
            unit="reqps",
            width=g.WIDTH,
        ),
    ]
    return g.dashboard(
        uid="autoscaler-operator-health",
        title="Elastic autoscaler: operator health",
        description="Whether the PyTorchJob operator keeps up with its jobs.",
        variables=[g.query_variable("instance", "Operator", g.series(m.leader), g.INSTANCE)],
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
