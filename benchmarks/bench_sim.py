"""The policies end to end on public traces, through the real engine: `make bench-sim`.

    python -m benchmarks.bench_sim                # every workload (about 30 minutes on 2 cores)
    python -m benchmarks.bench_sim --quick        # Pollux workload-1, ITP and the bundled default
    python -m benchmarks.bench_sim --out DIR      # also each run's results.json and plots

Workloads (data in `benchmarks/data/`, origins and licences in its README):
- `pollux-1..8`: Pollux's OSDI'21 setting: 64 T4 GPUs in 16 nodes of 4, its 8 workloads of 160
  jobs at 1x load, profiles from its measured traces (`autoscaler.sim.pollux`), a rescale stalls
  30 s, a decision every 60 s.
- `itp`: 160 consecutive ITP submissions (cluster08) on ElasticFlow's A100 profiles, 64 GPUs in
  8 nodes of 8, the same stall and interval.
- `default`: the simulator's bundled default exactly as `make demo` runs it (15 s stall).

Every policy runs with the same engine settings (`autoscaler.sim.settings`), every job declaring
its work. Then the policies that read the work left (`global-optimizer`, `optimus`) run again with
no job declaring it; the others never read it, so their runs stand for both regimes.

Targets, on every workload: the default policy (`global-optimizer`) has the lowest mean JCT of
every policy; at most 0.85x the best mean JCT of the policies that existed before it
(`PREVIOUS`); no worse than `optimus` (Optimus with the work known); p95 JCT at most 1.1x the best
other policy's; and with no work declared, still the lowest mean JCT of the resizing policies.
The figures are measured, never adjusted; a missed target prints NOT MET. Always exits 0.
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.sim import Comparison, SimConfig, compare
from autoscaler.sim.bundled import DEFAULT_CONFIG
from autoscaler.sim.lineup import DEFAULT_POLICIES
from autoscaler.sim.progress import ProgressBar
from autoscaler.sim.report import seconds

DATA = Path(__file__).parent / "data"
POLLUX = DATA / "pollux"
ITP = DATA / "itp" / "cluster08-160.csv"
POLLUX_CLUSTER = SimConfig(gpus=64, gpus_per_node=4, restart_seconds=30.0, interval_seconds=60.0)
ITP_CLUSTER = SimConfig(gpus=64, gpus_per_node=8, restart_seconds=30.0, interval_seconds=60.0)
OURS = "global-optimizer"
# The policies of the project before remaining work counted (the optimizer of that time is
# `speedup-optimizer`; `speedup-greedy` was called optimus-greedy).
PREVIOUS = (
    "static",
    "equal-share",
    "hpa-like",
    "speedup-greedy",
    "pollux-style",
    "speedup-optimizer",
)
STATIC_SIZES = ("static", "least-attained-service")  # never size a job by its curve
WORK_AWARE = (OURS, "optimus")  # the policies that read the work left
BLIND = " (no work declared)"
FIGURES = ("mean_jct", "p95_jct", "makespan", "gpu_utilization", "rescales", "mean_solve")


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: Path | None  # None: the bundled default
    profiles: Path | None
    config: SimConfig


def _figures(comparison: Comparison, policy: str) -> dict[str, float]:
    run = comparison.runs[policy]
    result = run.result
    return {
        "mean_jct": result.mean_jct or float("nan"),
        "p95_jct": result.p95_jct or float("nan"),
        "makespan": result.makespan,
        "gpu_utilization": result.gpu_utilisation,
        "rescales": float(result.rescales),
        "mean_solve": run.mean_solve_seconds or 0.0,
    }


def workloads(quick: bool) -> list[Workload]:
    pollux = [
        Workload(f"pollux-{i}", POLLUX / "workloads" / f"workload-{i}.csv", POLLUX / "traces",
                 POLLUX_CLUSTER)
        for i in range(1, 2 if quick else 9)
    ]  # fmt: skip
    return [
        *pollux,
        Workload("itp", ITP, None, ITP_CLUSTER),
        Workload("default", None, None, DEFAULT_CONFIG),
    ]


@dataclass(frozen=True)
class Measured:
    workload: str
    declared: Comparison  # every policy, every job declaring its work
    blind: Comparison  # the work-aware policies, no job declaring it

    def mean(self, policy: str) -> float:
        if policy.endswith(BLIND):
            return _figures(self.blind, policy.removesuffix(BLIND))["mean_jct"]
        return _figures(self.declared, policy)["mean_jct"]


def measure(workload: Workload, *, workers: int) -> Measured:
    results = []
    for label, policies, declared in (
        ("declared", DEFAULT_POLICIES, True),
        ("blind", WORK_AWARE, False),
    ):
        bar = ProgressBar(sys.stderr, title=f"{workload.name} ({label})")
        try:
            results.append(
                compare(
                    workload=workload.jobs,
                    profiles=workload.profiles,
                    config=dataclasses.replace(workload.config, declared_work=declared),
                    policies=policies,
                    progress=bar,
                    workers=workers,
                )
            )
        finally:
            bar.close()
    return Measured(workload.name, *results)


def table(measured: Measured) -> str:
    header = ("policy", "mean JCT", "p95 JCT", "makespan", "GPU util", "rescales", "mean solve")
    rows: list[tuple[str, ...]] = [header]
    bound = measured.declared.lower_bound
    for comparison, suffix in ((measured.declared, ""), (measured.blind, BLIND)):
        for policy in comparison.runs:
            f = _figures(comparison, policy)
            rows.append(
                (
                    policy + suffix,
                    _with_ratio(f["mean_jct"], bound.mean_jct),
                    _with_ratio(f["p95_jct"], bound.p95_jct),
                    _with_ratio(f["makespan"], bound.makespan),
                    f"{f['gpu_utilization']:.0%}",
                    f"{f['rescales']:.0f}",
                    f"{f['mean_solve'] * 1000:.1f} ms",
                )
            )
    bounds = [seconds(getattr(bound, f)) for f in ("mean_jct", "p95_jct", "makespan")]
    rows.append(("lower bound", *bounds, "", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _with_ratio(value: float, bound: float | None) -> str:
    return seconds(value) + (f" ({value / bound:.2f}x)" if bound else "")


@dataclass(frozen=True)
class Check:
    kind: str  # the target, the same on every workload
    detail: str  # which policy it was measured against here
    ratio: float
    limit: float

    @property
    def met(self) -> bool:
        return self.ratio <= self.limit


def targets(measured: Measured) -> list[Check]:
    declared = measured.declared
    ours = measured.mean(OURS)
    others = [p for p in declared.runs if p != OURS]
    best_other = min(others, key=measured.mean)
    best_previous = min(PREVIOUS, key=measured.mean)
    p95 = {p: _figures(declared, p)["p95_jct"] for p in declared.runs}
    best_p95 = min(others, key=lambda p: p95[p])
    resizing = [p for p in declared.runs if p not in STATIC_SIZES and p not in WORK_AWARE]
    best_resizing = min([*resizing, f"optimus{BLIND}"], key=measured.mean)
    ours_blind = measured.mean(OURS + BLIND)
    return [
        Check("lowest mean JCT of every policy", best_other,
              ours / measured.mean(best_other), 1.0),
        Check("<= 0.85x the best previous policy's mean JCT", best_previous,
              ours / measured.mean(best_previous), 0.85),
        Check("no worse than optimus (mean JCT)", "optimus", ours / measured.mean("optimus"), 1.0),
        Check("p95 JCT <= 1.1x the best other policy's", best_p95, p95[OURS] / p95[best_p95], 1.1),
        Check("no work declared: lowest mean JCT of the resizing policies", best_resizing,
              ours_blind / measured.mean(best_resizing), 1.0),
    ]  # fmt: skip


def report(measured: Measured) -> list[Check]:
    print(f"\n== {measured.workload}: {_describe(measured.declared)}\n")
    print(table(measured))
    print()
    checks = targets(measured)
    for check in checks:
        verdict = "met" if check.met else "NOT MET"
        print(f"target: {check.kind} (vs {check.detail}): {check.ratio:.3f} -> {verdict}")
    return checks


def as_json(measured: Measured, checks: list[Check]) -> dict[str, object]:
    policies = {p: _figures(measured.declared, p) for p in measured.declared.runs}
    policies |= {p + BLIND: _figures(measured.blind, p) for p in measured.blind.runs}
    return {
        "policies": policies,
        "targets": [dataclasses.asdict(check) | {"met": check.met} for check in checks],
    }


def _describe(comparison: Comparison) -> str:
    config = comparison.config
    return (
        f"{len(comparison.workload)} jobs, {config.gpus} GPUs in nodes of {config.gpus_per_node},"
        f" a rescale stalls {config.restart_seconds:g} s"
    )


def summary(checks: dict[str, list[Check]]) -> None:
    """On how many workloads each target was met, and its worst ratio."""
    print("\n== summary")
    for kind_checks in zip(*checks.values(), strict=True):
        met = sum(check.met for check in kind_checks)
        worst = max(check.ratio for check in kind_checks)
        kind = kind_checks[0].kind
        print(f"{kind}: met on {met} of {len(kind_checks)} workloads (worst ratio {worst:.3f})")


def save(measured: Measured, folder: Path) -> None:
    from autoscaler.sim.plots import write_plots  # noqa: PLC0415 (matplotlib: only for --out)

    target = folder / measured.workload
    target.mkdir(parents=True, exist_ok=True)
    text = json.dumps(measured.declared.to_json(jobs=True), indent=2) + "\n"
    (target / "results.json").write_text(text)
    write_plots(measured.declared, target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one Pollux workload, ITP, default")
    parser.add_argument("--out", type=Path, help="write each run's results.json and plots here")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", help="comma-separated workload names, e.g. itp,pollux-2")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    checks, results = {}, {}
    chosen = [w for w in workloads(args.quick) if not args.only or w.name in args.only.split(",")]
    for workload in chosen:
        measured = measure(workload, workers=args.parallel)
        checks[workload.name] = report(measured)
        results[workload.name] = as_json(measured, checks[workload.name])
        if args.out is not None:
            save(measured, args.out)
    summary(checks)
    print(
        "\nFor reference (not comparable: Pollux also adapts batch sizes, which no policy here"
        " does), Pollux's artifact on its 8 workloads: Pollux 2,751 s, Optimus+Oracle 5,682 s,"
        " Tiresias 4,038 s mean JCT."
    )
    if args.out is not None:
        (args.out / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
