"""The LP bound of bench-sim's workloads at finer slots: how much of a policy's distance from the
bound is only the slots' coarseness (a finer slot never lowers the bound).

    python -m benchmarks.lp_slots --only pollux-1 --halvings 3

Prints, per workload and slot length (bench-sim's, then halved `--halvings` times), the bound's
mean JCT and the seconds its solve took.
"""

import argparse
import sys
import time
from collections.abc import Sequence

from autoscaler.sim.inputs import read_inputs, read_profiles
from autoscaler.sim.lp_bound import default_slot_seconds, lp_bound
from benchmarks.bench_sim import Workload, workloads


def bound_lines(workload: Workload, *, halvings: int) -> list[str]:
    """One line per slot length: bench-sim's, then halved `halvings` times."""
    if isinstance(workload.jobs, tuple):
        jobs, profiles = workload.jobs, read_profiles(workload.profiles)
    else:
        jobs, profiles = read_inputs(workload.jobs, workload.profiles)
    gpus = workload.config.gpus
    slot = default_slot_seconds(jobs, profiles, total_gpus=gpus)
    lines = []
    for halving in range(halvings + 1):
        start = time.monotonic()
        bound = lp_bound(jobs, profiles, total_gpus=gpus, slot_seconds=slot / 2**halving)
        took = time.monotonic() - start
        lines.append(
            f"{workload.name}: {bound.slots} slots of {bound.slot_seconds:,.0f} s: mean JCT bound"
            f" {bound.mean_jct or float('nan'):,.0f} s (solved in {took:.1f} s)"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", required=True, help="comma-separated workload names")
    parser.add_argument("--halvings", type=int, default=3, help="times the slot is halved")
    args = parser.parse_args(argv)
    names = args.only.split(",")
    chosen = [w for w in workloads() if w.name in names]
    if len(chosen) != len(names):
        known = ", ".join(w.name for w in workloads())
        parser.error(f"unknown workload in {args.only!r}; known: {known}")
    for workload in chosen:
        for line in bound_lines(workload, halvings=args.halvings):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
