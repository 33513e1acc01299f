"""The policies end to end on public traces, through the real engine: `make bench-sim`.

    python -m benchmarks.bench_sim                # every evaluation workload
    python -m benchmarks.bench_sim --quick        # pollux-1, itp-next and default-next
    python -m benchmarks.bench_sim --tuning       # also the workloads the default was tuned on
    python -m benchmarks.bench_sim --out DIR      # also each run's results.json and plots

Workloads (data in `benchmarks/data/`, origins and licences in its README):
- `pollux-1..8`: Pollux's OSDI'21 setting: 64 T4 GPUs in 16 nodes of 4, its 8 workloads of 160
  jobs at 1x load, profiles from its measured traces (`autoscaler.sim.pollux`), a rescale stalls
  30 s, a decision every 60 s.
- `itp`: 160 consecutive ITP submissions (cluster08) on ElasticFlow's A100 profiles, 64 GPUs in
  8 nodes of 8, the same stall and interval.
- `default`: the simulator's bundled default exactly as `make demo` runs it (15 s stall).
- `itp-next`, `default-next`: later windows of the same ITP clusters (cluster08, cluster04), on the
  same profiles and cluster settings as `itp` and `default`, sharing no job with them.

The default's settings (its exponent and exploration rule) were chosen on `TUNING`; targets are
checked on the others only (`EVALUATION`). Every policy runs with the same engine settings
(`autoscaler.sim.settings`), every job declaring its work; then the policies that read the work
left (`WORK_AWARE`) run again with no job declaring it, the others' runs standing for both.

Then Pollux's workloads with goodput (`autoscaler.sim.goodput`: jobs progress by statistical
efficiency from Pollux's validation traces, the batch co-adapted with the count, except for the
paper's baselines `optimus` and `tiresias`, which keep each workload's batch), at loads 0.5, 1.0,
1.5 and 2.0 (`--goodput` runs only these): `optimus`, `tiresias`, `pollux-style` and the default.
Per load it prints `pollux-style / optimus` and `pollux-style / tiresias` (mean JCT over the
workloads) beside the ratios of Pollux's artifact, a target within 0.10 of them; on the evaluation
workloads (all but workloads 1-4 at load 1.0, on which the default was tuned) the default's mean
JCT must be at most 0.90x pollux-style's and its p95 no worse. On every workload the LP bound
must be at most every policy's mean JCT, and every policy's run at most 10% of its job-rounds
spread over more nodes than their GPUs fill (the step times assume packed workers).

Workers are placed as the operator's default `--planned-placement` places them (the simulator's
planned mode); with `--scheduler-placement` the goodput runs place them as kube-scheduler does
(the operator's `--planned-placement none`).

Then the default runs once more with every job preemptible (`elastic-autoscaler.io/preemptible:
"true"`, the simulator's `preemptible`): queueing on, the policy may hold jobs back.

Targets, per evaluation workload, with and without declared work, and with preemptible jobs: the
default policy's mean JCT at most 0.95x the best other policy's and at most 1.3x the LP bound; its
p95 JCT at most 1.1x the best other policy's. The figures are measured, never adjusted; a missed
target prints NOT MET with its figure, and the exit status is 1.
"""

import argparse
import dataclasses
import json
import math
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
from autoscaler.sim.report import COLUMNS, aligned, bound_rows, rows
from autoscaler.sim.workload import WorkloadJob

DATA = Path(__file__).parent / "data"
POLLUX = DATA / "pollux"
ITP = DATA / "itp" / "cluster08-160.csv"
ITP_NEXT = DATA / "itp" / "cluster08-160-next.csv"
DEFAULT_NEXT = DATA / "itp" / "cluster04-72-next.csv"
POLLUX_CLUSTER = SimConfig(gpus=64, gpus_per_node=4, restart_seconds=30.0, interval_seconds=60.0)
POLLUX_GOODPUT = dataclasses.replace(POLLUX_CLUSTER, goodput=True)  # its workloads with goodput
ITP_CLUSTER = SimConfig(gpus=64, gpus_per_node=8, restart_seconds=30.0, interval_seconds=60.0)
OURS = "global-optimizer"
WORK_AWARE = (OURS, "optimus", "afs-l", "hesrpt")  # the policies that read the work left
BLIND = " (no work declared)"
QUEUED = " (preemptible jobs)"
TUNING = ("itp", "default", "pollux-2", "pollux-3")
MEAN_VS_BEST_OTHER = 0.95
MEAN_VS_LP_BOUND = 1.3
P95_VS_BEST_OTHER = 1.1


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: Path | tuple[WorkloadJob, ...] | None  # None: the bundled default
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
        "spread_share": result.spread_share or 0.0,
        "suspensions": float(result.suspensions),
        "mean_solve": run.mean_solve_seconds or 0.0,
    }


def workloads() -> list[Workload]:
    """Every workload, tuning and evaluation."""
    pollux = [
        Workload(f"pollux-{i}", POLLUX / "workloads" / f"workload-{i}.csv", POLLUX / "traces",
                 POLLUX_CLUSTER)
        for i in range(1, 9)
    ]  # fmt: skip
    return [
        *pollux,
        Workload("itp", ITP, None, ITP_CLUSTER),
        Workload("default", None, None, DEFAULT_CONFIG),
        Workload("itp-next", ITP_NEXT, None, ITP_CLUSTER),
        Workload("default-next", DEFAULT_NEXT, None, DEFAULT_CONFIG),
    ]  # fmt: skip


QUICK = ("pollux-1", "itp-next", "default-next")


@dataclass(frozen=True)
class Measured:
    workload: str
    declared: Comparison  # every policy, every job declaring its work
    blind: Comparison  # the work-aware policies, no job declaring it
    queued: Comparison  # the default, every job declaring its work and preemptible

    def figure(self, policy: str, figure: str) -> float:
        if policy.endswith(QUEUED):
            return _figures(self.queued, policy.removesuffix(QUEUED))[figure]
        if policy.endswith(BLIND):
            return _figures(self.blind, policy.removesuffix(BLIND))[figure]
        return _figures(self.declared, policy)[figure]

    def mean(self, policy: str) -> float:
        return self.figure(policy, "mean_jct")

    def p95(self, policy: str) -> float:
        return self.figure(policy, "p95_jct")


def measure(workload: Workload, *, workers: int) -> Measured:
    results = []
    for label, policies, declared, preemptible in (
        ("declared", DEFAULT_POLICIES, True, False),
        ("blind", WORK_AWARE, False, False),
        ("preemptible", (OURS,), True, True),
    ):
        bar = ProgressBar(sys.stderr, title=f"{workload.name} ({label})")
        config = dataclasses.replace(
            workload.config, declared_work=declared, preemptible=preemptible
        )
        try:
            results.append(
                compare(
                    workload=workload.jobs,
                    profiles=workload.profiles,
                    config=config,
                    policies=policies,
                    progress=bar,
                    workers=workers,
                )
            )
        finally:
            bar.close()
    return Measured(workload.name, *results)


def table(measured: Measured) -> str:
    declared = rows(measured.declared)
    runs = len(measured.declared.runs)
    blind = [(row[0] + BLIND, *row[1:]) for row in rows(measured.blind)[: len(measured.blind.runs)]]
    queued = [(row[0] + QUEUED, *row[1:]) for row in rows(measured.queued)[:1]]
    return aligned([COLUMNS, *declared[:runs], *blind, *queued, *bound_rows(measured.declared)])


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
    return [
        *_targets(measured, blind=False),
        *_targets(measured, blind=True),
        *_targets(measured, blind=False, queued=True),
        *bound_checks(measured.declared),
    ]


def _targets(measured: Measured, *, blind: bool, queued: bool = False) -> list[Check]:
    """The three targets in one regime: every job declaring its work, or none; `queued`: the
    default with every job preemptible, against the same others (none of which holds a job
    back)."""
    suffix = BLIND if blind else ""
    ours = OURS + (QUEUED if queued else suffix)
    others = [p + (suffix if blind and p in WORK_AWARE else "") for p in measured.declared.runs
              if p != OURS]  # fmt: skip
    best_mean = min(others, key=measured.mean)
    best_p95 = min(others, key=measured.p95)
    bound = measured.declared.lp_bound.mean_jct or float("nan")
    regime = "no work declared" if blind else "work declared"
    regime = "preemptible jobs" if queued else regime
    return [
        Check(f"{regime}: mean JCT <= {MEAN_VS_BEST_OTHER}x the best other policy's", best_mean,
              measured.mean(ours) / measured.mean(best_mean), MEAN_VS_BEST_OTHER),
        Check(f"{regime}: mean JCT <= {MEAN_VS_LP_BOUND}x the LP bound", "LP bound",
              measured.mean(ours) / bound, MEAN_VS_LP_BOUND),
        Check(f"{regime}: p95 JCT <= {P95_VS_BEST_OTHER}x the best other policy's", best_p95,
              measured.p95(ours) / measured.p95(best_p95), P95_VS_BEST_OTHER),
    ]  # fmt: skip


def report(measured: Measured) -> list[Check]:
    tuned = " (tuning workload: no targets)" if measured.workload in TUNING else ""
    print(f"\n== {measured.workload}: {_describe(measured.declared)}{tuned}\n")
    print(table(measured))
    print()
    if tuned:
        return []
    checks = targets(measured)
    for check in checks:
        verdict = "met" if check.met else "NOT MET"
        print(f"target: {check.kind} (vs {check.detail}): {check.ratio:.3f} -> {verdict}")
    return checks


def as_json(measured: Measured, checks: list[Check]) -> dict[str, object]:
    policies = {p: _figures(measured.declared, p) for p in measured.declared.runs}
    policies |= {p + BLIND: _figures(measured.blind, p) for p in measured.blind.runs}
    policies |= {p + QUEUED: _figures(measured.queued, p) for p in measured.queued.runs}
    return {
        "policies": policies,
        "targets": [dataclasses.asdict(check) | {"met": check.met} for check in checks],
    }


def _describe(comparison: Comparison) -> str:
    config = comparison.config
    return (
        f"{len(comparison.workload)} jobs, {config.gpus} GPUs in nodes of {config.gpus_per_node},"
        f" a rescale stalls {config.restart_seconds:g} s"
        + ("" if config.planned_placement else ", workers placed as kube-scheduler places them")
    )


def summary(checks: dict[str, list[Check]]) -> None:
    """On how many workloads each target was met, and its worst ratio."""
    print("\n== summary")
    print(f"tuning workloads (no targets): {', '.join(TUNING)}")
    for kind_checks in zip(*(c for c in checks.values() if c), strict=True):
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


# Pollux's workloads with goodput: jobs progress by statistical efficiency
# (`autoscaler.sim.goodput`), the paper's baselines at the workloads' batches.
GOODPUT_POLICIES = ("optimus", "tiresias", "pollux-style", OURS)
GOODPUT_LOADS = {"0.5": "workloads-0.5", "1.0": "workloads", "1.5": "workloads-1.5",
                 "2.0": "workloads-2.0"}  # fmt: skip
GOODPUT_TUNING = tuple((f"workload-{i}", "1.0") for i in range(1, 5))
# Pollux's artifact, mean JCT over its 8 workloads: (Pollux / Optimus+Oracle, Pollux / Tiresias).
PAPER_RATIOS = {"0.5": (0.64, 0.73), "1.0": (0.48, 0.68), "1.5": (0.51, 0.60), "2.0": (0.54, 0.53)}
RATIO_TOLERANCE = 0.10
GOODPUT_MEAN_VS_POLLUX = 0.90
GOODPUT_P95_VS_POLLUX = 1.0
SPREAD_SHARE = 0.10  # of job-rounds on more nodes than needed: the step times assume packing


def goodput_comparison(
    workload: str, load: str, *, workers: int, planned: bool = True
) -> Comparison:
    """`planned`: the workers placed as the operator's `--planned-placement` places them, else
    as kube-scheduler does."""
    bar = ProgressBar(sys.stderr, title=f"goodput {workload} load {load}")
    try:
        return compare(
            workload=POLLUX / GOODPUT_LOADS[load] / f"{workload}.csv",
            profiles=POLLUX / "traces",
            config=dataclasses.replace(POLLUX_GOODPUT, planned_placement=planned),
            policies=GOODPUT_POLICIES,
            progress=bar,
            workers=workers,
        )
    finally:
        bar.close()


def bound_checks(comparison: Comparison) -> list[Check]:
    """The LP bound is a lower bound: at most every policy's mean JCT."""
    bound = comparison.lp_bound.mean_jct or float("nan")
    return [
        Check("LP bound <= every policy's mean JCT", policy,
              bound / (run.result.mean_jct or float("nan")), 1.0)
        for policy, run in comparison.runs.items()
    ]  # fmt: skip


def spread_checks(comparison: Comparison, where: str) -> list[Check]:
    """Each policy's run at most `SPREAD_SHARE` of its job-rounds spread over extra nodes."""
    return [
        Check(f"goodput: spread share <= {SPREAD_SHARE:.0%}", f"{where}, {policy}",
              run.result.spread_share or 0.0, SPREAD_SHARE)
        for policy, run in comparison.runs.items()
    ]  # fmt: skip


def goodput_report(
    workloads_chosen: Sequence[str], loads: Sequence[str], *, workers: int, planned: bool = True
) -> list[Check]:
    """Each workload and load's table, then per load the paper's ratios, and the targets."""
    checks: list[Check] = []
    means: dict[str, dict[str, list[float]]] = {}
    for load in loads:
        for workload in workloads_chosen:
            comparison = goodput_comparison(workload, load, workers=workers, planned=planned)
            tuned = (workload, load) in GOODPUT_TUNING
            note = " (tuning workload: no targets)" if tuned else ""
            print(f"\n== goodput {workload} at load {load}: {_describe(comparison)}{note}\n")
            print(aligned([COLUMNS, *rows(comparison)[: len(comparison.runs)],
                           *bound_rows(comparison)]))  # fmt: skip
            print()
            found = bound_checks(comparison) + spread_checks(comparison, f"{workload} load {load}")
            for policy, run in comparison.runs.items():
                means.setdefault(load, {}).setdefault(policy, []).append(
                    run.result.mean_jct or float("nan")
                )
            if not tuned:
                ours, pollux = comparison.runs[OURS].result, comparison.runs["pollux-style"].result
                found += [
                    Check(f"goodput: mean JCT <= {GOODPUT_MEAN_VS_POLLUX}x pollux-style's",
                          f"{workload} load {load}",
                          (ours.mean_jct or math.nan) / (pollux.mean_jct or math.nan),
                          GOODPUT_MEAN_VS_POLLUX),
                    Check("goodput: p95 JCT no worse than pollux-style's",
                          f"{workload} load {load}",
                          (ours.p95_jct or math.nan) / (pollux.p95_jct or math.nan),
                          GOODPUT_P95_VS_POLLUX),
                ]  # fmt: skip
            for check in found:
                verdict = "met" if check.met else "NOT MET"
                print(f"target: {check.kind} ({check.detail}): {check.ratio:.3f} -> {verdict}")
            checks += found
    print("\n== goodput: mean JCT over the workloads, against Pollux's artifact")
    print(f"tuning (no targets): {', '.join(f'{w} at {lo}' for w, lo in GOODPUT_TUNING)}")
    for load, by_policy in means.items():
        mean = {policy: sum(v) / len(v) for policy, v in by_policy.items()}
        figures = ", ".join(f"{policy} {value:,.0f} s" for policy, value in mean.items())
        print(f"load {load} ({len(next(iter(by_policy.values())))} workloads): {figures}")
        for baseline, paper in zip(("optimus", "tiresias"), PAPER_RATIOS[load], strict=True):
            ratio = mean["pollux-style"] / mean[baseline]
            check = Check(f"goodput: pollux-style / {baseline} within {RATIO_TOLERANCE} of the"
                          f" paper's {paper:.2f}", f"load {load}, reproduced {ratio:.2f}",
                          abs(ratio - paper), RATIO_TOLERANCE)  # fmt: skip
            verdict = "met" if check.met else "NOT MET"
            print(f"  pollux-style / {baseline}: {ratio:.2f} (paper {paper:.2f}) -> {verdict}")
            checks.append(check)
        print(f"  {OURS} / pollux-style: {mean[OURS] / mean['pollux-style']:.2f}")
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=", ".join(QUICK))
    parser.add_argument("--tuning", action="store_true", help="also the tuning workloads")
    parser.add_argument("--out", type=Path, help="write each run's results.json and plots here")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", help="comma-separated workload names, e.g. itp,pollux-2")
    parser.add_argument(
        "--goodput", action="store_true", help="only Pollux's workloads with goodput"
    )
    parser.add_argument("--goodput-workloads", default=",".join(f"workload-{i}" for i in
                        range(1, 9)), help="with goodput: e.g. workload-1,workload-5")  # fmt: skip
    parser.add_argument("--goodput-loads", default=",".join(GOODPUT_LOADS),
                        help="with goodput: e.g. 1.0,2.0")  # fmt: skip
    parser.add_argument("--scheduler-placement", action="store_true",
                        help="with goodput: workers placed as kube-scheduler places them (the"
                        " operator's --planned-placement none)")  # fmt: skip
    args = parser.parse_args(argv)
    started = time.perf_counter()
    checks, results = {}, {}
    chosen = [] if args.goodput else [w for w in workloads() if _chosen(w.name, args)]
    for workload in chosen:
        measured = measure(workload, workers=args.parallel)
        checks[workload.name] = report(measured)
        results[workload.name] = as_json(measured, checks[workload.name])
        if args.out is not None:
            save(measured, args.out)
    if chosen:
        summary(checks)
    if args.goodput or not (args.only or args.quick):
        goodput_checks = goodput_report(
            args.goodput_workloads.split(","), args.goodput_loads.split(","),
            workers=args.parallel, planned=not args.scheduler_placement,
        )  # fmt: skip
        checks["goodput"] = goodput_checks
        results["goodput"] = {"targets": [dataclasses.asdict(c) | {"met": c.met}
                                          for c in goodput_checks]}  # fmt: skip
    if args.out is not None:
        (args.out / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{time.perf_counter() - started:.0f} s")
    missed = [check for found in checks.values() for check in found if not check.met]
    return 1 if missed else 0


def _chosen(name: str, args: argparse.Namespace) -> bool:
    if args.only:
        return name in args.only.split(",")
    if args.quick:
        return name in QUICK
    return args.tuning or name not in TUNING


if __name__ == "__main__":
    sys.exit(main())
