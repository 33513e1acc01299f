"""A comparison as a text table and as JSON."""

from typing import Any

from autoscaler.sim.outcome import Outcome, PolicyRun
from autoscaler.sim.results import JobResult

QUEUED = "(preemptible jobs)"  # the rows of a run with every job preemptible
COLUMNS = (
    "policy", "model", "mean JCT", "p95 JCT", "makespan", "GPU util", "spread", "rescales",
    "mean solve",
)  # fmt: skip


def summary(run: PolicyRun) -> dict[str, object]:
    """The figures `-o json` promises for one policy."""
    result = run.result
    return {
        "model": run.model,
        "mean_jct_seconds": result.mean_jct,
        "p95_jct_seconds": result.p95_jct,
        "makespan_seconds": result.makespan,
        "gpu_utilization": result.gpu_utilisation,
        "spread_share": result.spread_share,
        "rescales": result.rescales,
        "mean_solve_seconds": run.mean_solve_seconds,
    }


def _job(job: JobResult) -> dict[str, object]:
    return {
        "name": job.name,
        "profile": job.profile,
        "status": job.status,
        "submit_seconds": job.submit,
        "start_seconds": job.start,
        "finish_seconds": job.finish,
        "jct_seconds": job.jct,
        "lower_bound_seconds": job.lower_bound,
        "rescales": job.rescales,
        "gpu_seconds": job.gpu_seconds,
    }


def to_json(comparison: Outcome, *, jobs: bool = False) -> dict[str, object]:
    """Figures per policy, their ratios to the lower bound, the bound, and what could not run."""
    policies: dict[str, object] = {}
    for name, run in comparison.runs.items():
        entry = summary(run)
        entry["ratio_to_lower_bound"] = comparison.ratios(name)
        entry["finished"] = run.result.finished
        entry["unfinished"] = list(run.result.unfinished)
        entry["policy_fallbacks"] = run.fallbacks
        if jobs:
            entry["jobs"] = [_job(job) for job in run.result.jobs]
        policies[name] = entry
    bound, config = comparison.lower_bound, comparison.config
    return {
        "policies": policies,
        "lower_bound": {
            "mean_jct_seconds": bound.mean_jct,
            "p95_jct_seconds": bound.p95_jct,
            "makespan_seconds": bound.makespan,
        },
        "lp_bound": {
            "mean_jct_seconds": comparison.lp_bound.mean_jct,
            "slot_seconds": comparison.lp_bound.slot_seconds,
        },
        "rejected": [{"name": name, "reason": reason} for name, reason in comparison.rejected],
        "torchft_effect": torchft_effect(comparison),
        "jobs": len(comparison.workload),
        "cluster": {
            "gpus": config.gpus,
            "gpus_per_node": config.gpus_per_node,
            "restart_seconds": config.restart_seconds,
            "interval_seconds": config.interval_seconds,
            "declared_work": "all" if config.declared_work else "none",
            "placement_rates": config.placement_rates,
            "planned_placement": config.planned_placement,
        },
    }


def torchft_effect(comparison: Outcome) -> dict[str, Any] | None:
    """A policy's mean JCT with every job in torchft mode, and its ratio to the policy's own
    run (None when not simulated)."""
    if comparison.torchft is None:
        return None
    name = comparison.torchft.name
    mean = comparison.torchft.result.mean_jct
    base = comparison.runs[name].result.mean_jct
    return {
        "policy": name,
        "mean_jct_seconds": mean,
        "ratio": mean / base if mean is not None and base else None,
    }


def _declared(declared: bool) -> str:
    return "every job declares its work" if declared else "no job declares its work"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} s"


def _with_ratio(value: float | None, ratio: float | None) -> str:
    return seconds(value) + ("" if ratio is None else f" ({ratio:.2f}x)")


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _solve(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def rows(comparison: Outcome) -> list[tuple[str, ...]]:
    """The table's cells: a row per policy, then the LP bound and each job alone."""
    cells: list[tuple[str, ...]] = []
    for name, run in comparison.runs.items():
        result, ratios = run.result, comparison.ratios(name)
        cells.append(
            (
                name,
                run.model,
                _with_ratio(result.mean_jct, ratios["mean_jct"]),
                _with_ratio(result.p95_jct, ratios["p95_jct"]),
                _with_ratio(result.makespan, ratios["makespan"]),
                f"{result.gpu_utilisation:.0%}",
                share(result.spread_share),
                str(result.rescales),
                _solve(run.mean_solve_seconds),
            )
        )
    cells.extend(bound_rows(comparison))
    return cells


def bound_rows(comparison: Outcome) -> list[tuple[str, ...]]:
    """The LP bound (mean JCT only) and each job alone, as table rows."""
    bound, relaxed = comparison.lower_bound, comparison.lp_bound
    alone = (seconds(bound.mean_jct), seconds(bound.p95_jct), seconds(bound.makespan))
    lp = f"LP bound ({relaxed.slot_seconds:.0f} s slots)"
    return [(lp, "", seconds(relaxed.mean_jct), "", "", "", "", "", ""),
            ("each job alone", "", *alone, "", "", "", "")]  # fmt: skip


def aligned(cells: list[tuple[str, ...]]) -> str:
    """Rows of cells as text columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join([row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]).rstrip()
        for row in cells
    )  # fmt: skip


def table(comparison: Outcome, *, queued: Outcome | None = None) -> str:
    """The comparison for people: a header line, the table, then jobs that did not finish;
    `queued`: the same workload with every job preemptible, its runs as rows of their own."""
    config = comparison.config
    nodes = len(config.node_sizes())
    lines = [
        f"{len(comparison.workload)} jobs on {config.gpus} GPUs ({nodes} nodes of up to"
        f" {config.gpus_per_node}); a rescale stalls {config.restart_seconds:g} s; a decision"
        f" every {config.interval_seconds:g} s; {_declared(config.declared_work)}."
        " (x) = mean JCT over the LP bound, p95 and makespan over each job alone; spread = share"
        " of running jobs per round on more nodes than their GPUs fill.",
        "",
    ]
    extra = [] if queued is None else rows(queued)[: len(queued.runs)]
    extra = [(f"{row[0]} {QUEUED}", *row[1:]) for row in extra]
    policies = rows(comparison)
    runs = len(comparison.runs)
    lines.append(aligned([COLUMNS, *policies[:runs], *extra, *policies[runs:]]))
    if effect := torchft_effect(comparison):
        ratio = "-" if effect["ratio"] is None else f"{effect['ratio']:.3f}x"
        lines.append(
            f"torchft mode, every job (a resize pauses {config.torchft_pause_seconds:g} s, no"
            f" worker restarts): {effect['policy']} mean JCT {seconds(effect['mean_jct_seconds'])}"
            f", {ratio} its run above"
        )
    for name, reason in comparison.rejected:
        lines.append(f"can never run (not simulated): {name}: {reason}")
    every = [*comparison.runs.items()]
    every += [(f"{name} {QUEUED}", run) for name, run in (queued.runs.items() if queued else [])]
    for name, run in every:
        if run.result.unfinished:
            left = ", ".join(run.result.unfinished)
            lines.append(f"{name}: unfinished at the horizon: {left}")
        if run.fallbacks:
            lines.append(f"{name}: the policy failed or overran in {run.fallbacks} rounds")
    return "\n".join(lines) + "\n"
