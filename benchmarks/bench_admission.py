"""Admission: the default policy starting waiting jobs against the present rule (`make bench-sim`).

    python -m benchmarks.bench_admission                    # evaluation workloads 5-8, load 1.0
    python -m benchmarks.bench_admission --workloads workload-5 --parallel 2
    python -m benchmarks.bench_admission --load 2.0         # another of bench-sim's loads

On Pollux's workloads with goodput (the cluster and data of `benchmarks.bench_sim`), the default
runs twice per workload, in the same process pool:
- the present rule: no job preemptible, so every arriving job starts at its count once its
  minimum fits, first come first served;
- waiting jobs visible: every job preemptible and declaring its samples/s by count (what its own
  profiling run gives; with goodput, in samples at its base batch), so the policy decides which
  waiting job starts and when, from its declared curve.
Both with every job declaring its work, then with none declaring it. Targets, per workload and
regime: mean JCT at most 0.95x the present rule's, p95 at most 1.1x. A miss prints NOT MET with
its figure and the exit status is 1. No setting was chosen on these workloads.
"""

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from autoscaler.sim import SimConfig, compare
from autoscaler.sim.results import RunResult
from benchmarks.bench_sim import GOODPUT_LOADS, OURS, POLLUX, POLLUX_GOODPUT, Check

EVALUATION = tuple(f"workload-{i}" for i in range(5, 9))
MEAN_LIMIT = 0.95
P95_LIMIT = 1.1
RULES = {
    "present rule": POLLUX_GOODPUT,
    "waiting jobs visible": dataclasses.replace(
        POLLUX_GOODPUT, preemptible=True, declared_profiles=True
    ),
}


def run(workload: str, config: SimConfig, load: str) -> RunResult:
    """The default on one Pollux workload at `load` with `config`."""
    comparison = compare(
        workload=POLLUX / GOODPUT_LOADS[load] / f"{workload}.csv",
        profiles=POLLUX / "traces",
        config=config,
        policies=[OURS],
    )
    return comparison.runs[OURS].result


def figures(result: RunResult) -> str:
    return f"mean {result.mean_jct or 0:,.0f} s, p95 {result.p95_jct or 0:,.0f} s"


def checks(workload: str, regime: str, present: RunResult, waiting: RunResult) -> list[Check]:
    detail = f"{workload}, {regime}"
    return [
        Check(f"admission: mean JCT <= {MEAN_LIMIT}x the present rule's", detail,
              (waiting.mean_jct or float("nan")) / (present.mean_jct or float("nan")),
              MEAN_LIMIT),
        Check(f"admission: p95 JCT <= {P95_LIMIT}x the present rule's", detail,
              (waiting.p95_jct or float("nan")) / (present.p95_jct or float("nan")), P95_LIMIT),
    ]  # fmt: skip


def report(workloads: Sequence[str], *, workers: int, load: str = "1.0") -> list[Check]:
    """Every workload's two runs per regime, their figures, and the targets."""
    found: list[Check] = []
    regimes = {"work declared": True, "no work declared": False}
    cases = [
        (workload, regime, rule, dataclasses.replace(config, declared_work=declared))
        for regime, declared in regimes.items()
        for workload in workloads
        for rule, config in RULES.items()
    ]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run, workload, config, load) for workload, _, _, config in cases]
        results = {
            (workload, regime, rule): future.result()
            for (workload, regime, rule, _), future in zip(cases, futures, strict=True)
        }
    print(f"\n== admission: {OURS} on Pollux's workloads with goodput, load {load}")
    for regime in regimes:
        for workload in workloads:
            present = results[(workload, regime, "present rule")]
            waiting = results[(workload, regime, "waiting jobs visible")]
            print(f"{workload}, {regime}: present rule {figures(present)};"
                  f" waiting jobs visible {figures(waiting)}")  # fmt: skip
            for check in checks(workload, regime, present, waiting):
                verdict = "met" if check.met else "NOT MET"
                print(f"target: {check.kind} ({check.detail}): {check.ratio:.3f} -> {verdict}")
                found.append(check)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=",".join(EVALUATION), help="comma-separated")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--load", choices=list(GOODPUT_LOADS), default="1.0")
    args = parser.parse_args(argv)
    found = report(args.workloads.split(","), workers=args.parallel, load=args.load)
    return 1 if any(not check.met for check in found) else 0


if __name__ == "__main__":
    sys.exit(main())
