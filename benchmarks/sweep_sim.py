"""The default policy beside variants of its configuration, on some of bench-sim's workloads.

The runs docs/benchmarks.md quotes (how the default's settings were chosen):

    python -m benchmarks.sweep_sim --only itp,default,pollux-2,pollux-3 \\
        --variant 'p0={"objective":{"exponent":0}}' \\
        --variant 'p-0.5={"objective":{"exponent":-0.5}}' \\
        --variant 'p-1={"objective":{"exponent":-1}}'
    python -m benchmarks.sweep_sim --only itp,default,pollux-2,pollux-3 --noise 0.1 \\
        --variant 'one-step={"model":{}}' \\
        --variant 'twice-fit={"model":{"exploration_factor":2}}' \\
        --variant 'unbounded={"model":{"exploration_factor":64,"extrapolation":"optimistic"}}'

With goodput (Pollux's workloads at a load, `pollux-style` beside the default as the reference):

    python -m benchmarks.sweep_sim --goodput 1.0 \\
        --only workload-1,workload-2,workload-3,workload-4 \\
        --variant 'p-0.5={"objective":{"exponent":-0.5}}' \\
        --variant 'p-1={"objective":{"exponent":-1}}'

The default's rank exponent, on both tuning sets (the default is 0.5), then the default on the
evaluation workloads at each load (`--goodput 0.5`, `1.5`, `2.0` too):

    python -m benchmarks.sweep_sim --goodput 1.0 \\
        --only workload-1,workload-2,workload-3,workload-4 \\
        --variant 'a0={"objective":{"rank_exponent":0}}' \\
        --variant 'a0.25={"objective":{"rank_exponent":0.25}}' \\
        --variant 'a0.75={"objective":{"rank_exponent":0.75}}' \\
        --variant 'a1={"objective":{"rank_exponent":1}}'
    python -m benchmarks.sweep_sim --only itp,default,pollux-2,pollux-3 \\
        --variant 'a0={"objective":{"rank_exponent":0}}' \\
        --variant 'a0.25={"objective":{"rank_exponent":0.25}}' \\
        --variant 'a0.75={"objective":{"rank_exponent":0.75}}' \\
        --variant 'a1={"objective":{"rank_exponent":1}}'
    python -m benchmarks.sweep_sim --goodput 1.0 \\
        --only workload-5,workload-6,workload-7,workload-8

Prints each variant's mean and p95 JCT, GPU utilisation and spread share per workload, and the
mean JCT summed over the workloads; every job declares its work unless `--declared-work none`; with
`--preemptible` every job may be held back, so the policy starts waiting jobs; with
`--placement-rates` a goodput job that fits one node but runs on several is charged the cross-node
rate. A job's workers are placed as one unit, packed (`autoscaler.api.packing`: the operator's
default `--planned-placement`); with `--scheduler-placement` as kube-scheduler places each pod.
"""

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from autoscaler.sim import SimConfig, compare
from autoscaler.sim.lineup import PolicyChoice
from autoscaler.sim.progress import ProgressBar
from autoscaler.sim.report import share
from benchmarks.bench_sim import GOODPUT_LOADS, OURS, POLLUX, POLLUX_GOODPUT, workloads


def _variant(text: str) -> PolicyChoice:
    name, _, config = text.partition("=")
    return PolicyChoice(name, OURS, json.loads(config))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", required=True, help="comma-separated workload names")
    parser.add_argument("--variant", action="append", default=[], type=_variant,
                        help=f"NAME=JSON: {OURS} with this config (repeatable)")  # fmt: skip
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--declared-work", choices=["all", "none"], default="all")
    parser.add_argument("--preemptible", action="store_true",
                        help="every job preemptible: the policy starts waiting jobs")  # fmt: skip
    parser.add_argument("--declared-profiles", action="store_true",
                        help="every job declares its samples/s by count")  # fmt: skip
    parser.add_argument("--placement-rates", action="store_true",
                        help="with goodput, a one-node job split over nodes runs at the"
                        " cross-node rate")  # fmt: skip
    parser.add_argument("--scheduler-placement", action="store_true",
                        help="each pod placed as kube-scheduler places it, not the job packed"
                        " as one unit")  # fmt: skip
    parser.add_argument("--waiting-prior", choices=["none", "running-median"], default="none",
                        help="the engine's waiting_prior")  # fmt: skip
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--goodput", choices=sorted(GOODPUT_LOADS), metavar="LOAD",
                        help="Pollux's workloads with goodput at LOAD")  # fmt: skip
    args = parser.parse_args(argv)
    names = args.only.split(",")
    reference = ["pollux-style"] if args.goodput else []
    policies = [*reference, OURS, *args.variant]
    totals = dict.fromkeys([*reference, OURS, *(v.name for v in args.variant)], 0.0)
    for label, jobs, profiles, settings in _chosen(names, goodput_load=args.goodput):
        config = dataclasses.replace(
            settings,
            noise=args.noise,
            declared_work=args.declared_work == "all",
            preemptible=args.preemptible,
            waiting_prior=args.waiting_prior,
            declared_profiles=args.declared_profiles,
            placement_rates=args.placement_rates,
            planned_placement=not args.scheduler_placement,
        )
        bar = ProgressBar(sys.stderr, title=label)
        try:
            comparison = compare(
                workload=jobs,
                profiles=profiles,
                config=config,
                policies=policies,
                progress=bar,
                workers=args.parallel,
            )
        finally:
            bar.close()
        cells = []
        for name, run in comparison.runs.items():
            mean, p95 = run.result.mean_jct or 0.0, run.result.p95_jct or 0.0
            totals[name] += mean
            busy, spread = run.result.gpu_utilisation, share(run.result.spread_share)
            cells.append(f"{name}: mean {mean:,.0f} s, p95 {p95:,.0f} s, GPUs busy {busy:.0%},"
                         f" spread {spread}")  # fmt: skip
        print(f"{label}: " + " | ".join(cells), flush=True)
    print("mean JCT summed: " + ", ".join(f"{n} {t:,.0f} s" for n, t in totals.items()))
    return 0


Chosen = tuple[str, Any, Any, SimConfig]


def _chosen(names: Sequence[str], *, goodput_load: str | None) -> Iterator[Chosen]:
    """(name, jobs, profiles, cluster) of each named workload: bench-sim's, or with goodput
    Pollux's workload files at that load (read by `compare`)."""
    if goodput_load is None:
        for workload in (w for w in workloads() if w.name in names):
            yield workload.name, workload.jobs, workload.profiles, workload.config
        return
    for name in names:
        path = POLLUX / GOODPUT_LOADS[goodput_load] / f"{name}.csv"
        yield name, path, POLLUX / "traces", POLLUX_GOODPUT


if __name__ == "__main__":
    sys.exit(main())
