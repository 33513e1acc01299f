"""`autoscaler simulate`: the real engine on a simulated cluster, one run per policy, compared.

With no arguments: the bundled default (72 ITP jobs on ElasticFlow's A100 profiles, 64 GPUs in
8 nodes of 8) under the six built-in policy configurations.
"""

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.policies.registry import DEFAULT_POLICY, PolicyError
from autoscaler.sim.bundled import DEFAULT_CONFIG
from autoscaler.sim.comparison import Comparison, compare
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.inputs import read_inputs
from autoscaler.sim.lineup import DEFAULT_POLICIES, PolicyChoice
from autoscaler.sim.progress import ProgressBar
from autoscaler.sim.simulation import SimConfig

USAGE_ERROR = 2


def add_simulate_command(commands: Any) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="compare policies on a simulated cluster (the bundled default with no arguments)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simulate.add_argument(
        "--workload", type=Path, help="workload CSV, or a Pollux workload (default: bundled)"
    )
    simulate.add_argument(
        "--profiles",
        type=Path,
        help="folder of profile CSVs, or of Pollux traces (default: the bundled A100 profiles)",
    )
    simulate.add_argument("--gpus", type=_positive, default=DEFAULT_CONFIG.gpus)
    simulate.add_argument("--gpus-per-node", type=_positive, default=DEFAULT_CONFIG.gpus_per_node)
    simulate.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help="comma-separated: installed policies, pollux-style, or .py files",
    )
    simulate.add_argument("--seed", type=int, default=0, help="seed of the throughput noise")
    simulate.add_argument(
        "--noise",
        type=_fraction,
        default=DEFAULT_CONFIG.noise,
        help="relative std-dev of the throughput the engine reads (default: exact)",
    )
    simulate.add_argument(
        "--declared-work",
        choices=["all", "none"],
        default="all",
        help="whether jobs declare their total samples (as the total-samples annotation or the"
        " training helper would); with none, policies estimate the work left (default: all)",
    )
    simulate.add_argument(
        "--torchft",
        choices=["workload", "all"],
        default="workload",
        help="which jobs run in torchft mode (a resize pauses them briefly instead of restarting"
        " every worker): those the workload's fault_tolerance column marks, or all; with"
        " workload, the first policy is also run with all of them, to show the effect",
    )
    simulate.add_argument(
        "--goodput",
        action="store_true",
        help="with a Pollux workload and its traces: jobs progress by statistical efficiency and"
        " co-adapt their batch with their count (optimus and tiresias keep the workload's"
        " batch, as Pollux's paper ran them); the default policy also runs with every job at"
        " the workload's batch, to show the effect",
    )
    simulate.add_argument(
        "--placement-rates",
        action="store_true",
        help="with --goodput: a job whose workers fit one node but run on several trains at the"
        " rate its fitted step-time model gives across nodes (default: every placement is"
        " charged as packed)",
    )
    simulate.add_argument(
        "--queueing",
        action="store_true",
        help="also run the default policy with every job preemptible (the engine may hold jobs"
        " back), as a row of its own",
    )
    simulate.add_argument(
        "--check",
        action="store_true",
        help="only read and check the workload and profiles, then exit (no simulation)",
    )
    simulate.add_argument("--out", type=Path, help="write results.json and PNG plots here")
    simulate.add_argument("-o", "--output", choices=["table", "json"], default="table")
    simulate.add_argument(
        "--parallel",
        type=_positive,
        default=os.cpu_count() or 1,
        help="policies simulated at once, in processes (default: the CPU count)",
    )
    simulate.set_defaults(command=run_simulate)


# The effect of co-adapting the batch: the default policy with every job at the workload's batch.
FIXED_BATCH_DEFAULT = PolicyChoice(
    f"{DEFAULT_POLICY} (fixed batch)", DEFAULT_POLICY, adapts_batch=False
)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1)")
    return value


# matplotlib is the `sim` extra: the operator's image does not carry it.
NO_MATPLOTLIB = (
    "--out draws its plots with matplotlib, which is not installed:"
    " pip install 'pytorch-elastic-autoscaler[sim]'"
)


def run_simulate(args: argparse.Namespace) -> int:
    if args.out is not None and importlib.util.find_spec("matplotlib") is None:
        print(f"error: {NO_MATPLOTLIB}", file=sys.stderr)  # before the minutes of simulation
        return USAGE_ERROR
    if args.placement_rates and not args.goodput:
        print("error: --placement-rates charges goodput jobs: add --goodput", file=sys.stderr)
        return USAGE_ERROR
    try:
        jobs, profiles = read_inputs(args.workload, args.profiles)
        if args.check:
            print(f"{len(jobs)} jobs on {len(profiles)} profiles: the inputs are valid")
            return 0
        config = replace(
            DEFAULT_CONFIG,
            gpus=args.gpus,
            gpus_per_node=args.gpus_per_node,
            seed=args.seed,
            noise=args.noise,
            declared_work=args.declared_work == "all",
            torchft=args.torchft == "all",
            goodput=args.goodput,
            placement_rates=args.placement_rates,
        )
        policies: list[str | PolicyChoice] = [
            name.strip() for name in args.policies.split(",") if name.strip()
        ]
        if args.goodput:
            policies.append(FIXED_BATCH_DEFAULT)
        bar = ProgressBar(sys.stderr)
        try:
            comparison = compare(
                workload=jobs,
                profiles=profiles,
                policies=policies,
                config=config,
                progress=bar,
                workers=args.parallel,
                torchft_effect=True,
            )
        finally:
            bar.close()
        queued = _queued(args, jobs=jobs, profiles=profiles, config=config)
    except (SimInputError, PolicyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    if args.out is not None:
        from autoscaler.sim.plots import write_plots  # noqa: PLC0415 (matplotlib: only for --out)

        args.out.mkdir(parents=True, exist_ok=True)
        results = json.dumps(comparison.to_json(jobs=True), indent=2) + "\n"
        (args.out / "results.json").write_text(results)
        written = write_plots(comparison, args.out)
        names = ", ".join(path.name for path in written)
        print(f"wrote results.json, {names} to {args.out}", file=sys.stderr)
    if args.output == "json":
        figures = comparison.to_json()
        if queued is not None:
            figures["preemptible_jobs"] = queued.to_json()
        print(json.dumps(figures, indent=2))
    else:
        sys.stdout.write(comparison.table(queued=queued))
    return 0


def _queued(
    args: argparse.Namespace, *, jobs: Any, profiles: Any, config: SimConfig
) -> Comparison | None:
    """With --queueing: the default policy again, every job preemptible."""
    if not args.queueing:
        return None
    bar = ProgressBar(sys.stderr)
    try:
        return compare(
            workload=jobs,
            profiles=profiles,
            policies=[DEFAULT_POLICY],
            config=replace(config, preemptible=True),
            progress=bar,
        )
    finally:
        bar.close()
