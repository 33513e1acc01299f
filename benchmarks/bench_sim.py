"""The policies end to end on public traces, through the real engine: `make bench-sim`.

    python -m benchmarks.bench_sim                # both benchmarks (about 3 minutes on 2 cores)
    python -m benchmarks.bench_sim --quick        # Pollux workload-1 only, then the ITP subset
    python -m benchmarks.bench_sim --out DIR      # also each run's results.json and plots

Benchmarks (data in `benchmarks/data/`, origins and licences in its README):
- `pollux`: Pollux's OSDI'21 setting: 64 T4 GPUs in 16 nodes of 4, its 8 workloads of 160 jobs at
  1x load (`workloads/workload-{1..8}.csv`), profiles from its measured traces
  (`autoscaler.sim.pollux`), a rescale stalls 30 s, a decision every 60 s. Figures are the mean
  over the workloads (as Pollux reports them); ratios are to the mean of the lower bounds.
- `itp`: 160 consecutive ITP submissions (cluster08) on ElasticFlow's A100 profiles, 64 GPUs in
  8 nodes of 8.

Every policy runs with the same engine settings (`autoscaler.sim.settings`). Targets (issue 5),
on mean JCT: global-optimizer <= 0.6 x optimus-greedy, <= 0.5 x static, <= pollux-style. The
figures are measured, never adjusted; a missed target prints NOT MET. Always exits 0.
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.sim import Comparison, SimConfig, compare
from autoscaler.sim.lineup import DEFAULT_POLICIES
from autoscaler.sim.progress import ProgressBar
from autoscaler.sim.report import seconds

DATA = Path(__file__).parent / "data"
POLLUX = DATA / "pollux"
ITP = DATA / "itp" / "cluster08-160.csv"
POLLUX_CLUSTER = SimConfig(gpus=64, gpus_per_node=4, restart_seconds=30.0, interval_seconds=60.0)
ITP_CLUSTER = SimConfig(gpus=64, gpus_per_node=8, restart_seconds=30.0, interval_seconds=60.0)
OURS = "global-optimizer"
TARGETS = (("optimus-greedy", 0.6), ("static", 0.5), ("pollux-style", 1.0))
FIGURES = ("mean_jct", "p95_jct", "makespan", "gpu_utilization", "rescales", "mean_solve")


@dataclass(frozen=True)
class Bench:
    name: str
    comparisons: tuple[Comparison, ...]  # one per workload

    def figure(self, policy: str, figure: str) -> float:
        """The mean over the workloads of one policy's figure."""
        values = [_figures(c, policy)[figure] for c in self.comparisons]
        return sum(values) / len(values)

    def bound(self, figure: str) -> float | None:
        bounds = [getattr(c.lower_bound, figure, None) for c in self.comparisons]
        known = [b for b in bounds if b is not None]
        return sum(known) / len(known) if len(known) == len(bounds) else None


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


def _with_ratio(value: float, bound: float | None) -> str:
    return seconds(value) + (f" ({value / bound:.2f}x)" if bound else "")


def table(bench: Bench) -> str:
    header = ("policy", "mean JCT", "p95 JCT", "makespan", "GPU util", "rescales", "mean solve")
    rows = [header]
    for policy in bench.comparisons[0].runs:
        rows.append(
            (
                policy,
                _with_ratio(bench.figure(policy, "mean_jct"), bench.bound("mean_jct")),
                _with_ratio(bench.figure(policy, "p95_jct"), bench.bound("p95_jct")),
                _with_ratio(bench.figure(policy, "makespan"), bench.bound("makespan")),
                f"{bench.figure(policy, 'gpu_utilization'):.0%}",
                f"{bench.figure(policy, 'rescales'):.0f}",
                f"{bench.figure(policy, 'mean_solve') * 1000:.1f} ms",
            )
        )
    bounds = [seconds(bench.bound(f)) for f in ("mean_jct", "p95_jct", "makespan")]
    rows.append(("lower bound", *bounds, "", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def targets(bench: Bench) -> list[tuple[str, float, float, bool]]:
    """(baseline, measured ratio of our mean JCT to it, target ratio, met)."""
    ours = bench.figure(OURS, "mean_jct")
    checks = []
    for baseline, target in TARGETS:
        ratio = ours / bench.figure(baseline, "mean_jct")
        checks.append((baseline, ratio, target, ratio <= target))
    return checks


def run_bench(
    name: str, workloads: Sequence[Path], *, profiles: Path | None, config: SimConfig, workers: int
) -> Bench:
    comparisons = []
    for index, workload in enumerate(workloads):
        bar = ProgressBar(sys.stderr, title=f"{name} {index + 1}/{len(workloads)}")
        try:
            comparisons.append(
                compare(
                    workload=workload,
                    profiles=profiles,
                    policies=DEFAULT_POLICIES,
                    config=config,
                    progress=bar,
                    workers=workers,
                )
            )
        finally:
            bar.close()
    return Bench(name, tuple(comparisons))


def report(bench: Bench, *, describe: str) -> dict[str, object]:
    print(f"\n== {bench.name}: {describe}")
    print("figures: mean over the workloads; (x) = ratio to the lower bound\n")
    print(table(bench))
    print()
    results = []
    for baseline, ratio, target, met in targets(bench):
        verdict = "met" if met else "NOT MET"
        print(f"target {OURS} <= {target:g} x {baseline} (mean JCT): {ratio:.2f} x -> {verdict}")
        results.append({"baseline": baseline, "ratio": ratio, "target": target, "met": met})
    return {
        "workloads": len(bench.comparisons),
        "policies": {
            policy: {figure: bench.figure(policy, figure) for figure in FIGURES}
            for policy in bench.comparisons[0].runs
        },
        "lower_bound": {f: bench.bound(f) for f in ("mean_jct", "p95_jct", "makespan")},
        "targets": results,
    }


def save(bench: Bench, folder: Path, names: Sequence[str]) -> None:
    from autoscaler.sim.plots import write_plots  # noqa: PLC0415 (matplotlib: only for --out)

    for comparison, name in zip(bench.comparisons, names, strict=True):
        target = folder / bench.name / name
        target.mkdir(parents=True, exist_ok=True)
        text = json.dumps(comparison.to_json(jobs=True), indent=2) + "\n"
        (target / "results.json").write_text(text)
        write_plots(comparison, target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="Pollux workload-1 only")
    parser.add_argument("--out", type=Path, help="write each run's results.json and plots here")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    count = 1 if args.quick else 8
    pollux_workloads = [POLLUX / "workloads" / f"workload-{i}.csv" for i in range(1, count + 1)]
    pollux = run_bench(
        "pollux",
        pollux_workloads,
        profiles=POLLUX / "traces",
        config=POLLUX_CLUSTER,
        workers=args.parallel,
    )
    itp = run_bench("itp", [ITP], profiles=None, config=ITP_CLUSTER, workers=args.parallel)
    summary = {
        "pollux": report(
            pollux,
            describe=f"{len(pollux_workloads)} Pollux workload(s) x 160 jobs, 64 T4 GPUs (16 x 4)",
        ),
        "itp": report(itp, describe="160 ITP jobs (cluster08), A100 profiles, 64 GPUs (8 x 8)"),
    }
    print(
        "\nFor reference (not comparable: Pollux also adapts batch sizes, which no policy here"
        " does), Pollux's artifact on its 8 workloads: Pollux 2,751 s, Optimus+Oracle 5,682 s,"
        " Tiresias 4,038 s mean JCT."
    )
    if args.out is not None:
        save(pollux, args.out, [path.stem for path in pollux_workloads])
        save(itp, args.out, [ITP.stem])
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
