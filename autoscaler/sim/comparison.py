"""Policies compared on one workload: the real `Engine` over the simulated cluster, once per policy.

    from autoscaler.sim import compare
    comparison = compare(policies=["static", "global-optimizer"])   # the bundled default
    print(comparison.table())

Every policy runs on the same jobs, profiles and cluster, with the same engine settings
(`autoscaler.sim.settings`); the figures are those of `autoscaler.sim.results`, each set beside a
lower bound no policy can beat (`autoscaler.sim.bounds`).
"""

import multiprocessing
import queue
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from datetime import datetime
from multiprocessing.queues import Queue
from pathlib import Path

from autoscaler.engine.engine import Engine
from autoscaler.policies.contract import reporting_of
from autoscaler.policies.registry import DEFAULT_POLICY
from autoscaler.sim import report
from autoscaler.sim.bounds import workload_bound
from autoscaler.sim.bundled import DEFAULT_CONFIG
from autoscaler.sim.goodput import GoodputWorkload, goodput_workload
from autoscaler.sim.inputs import read_profiles, read_workload
from autoscaler.sim.lineup import DEFAULT_POLICIES, PolicyChoice, built, lineup, model_of
from autoscaler.sim.lp_bound import lp_bound
from autoscaler.sim.outcome import Outcome, PolicyRun
from autoscaler.sim.profiles import Profile
from autoscaler.sim.settings import engine_config
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.state import Phase
from autoscaler.sim.workload import WorkloadJob

Progress = Callable[[int, int, str], None]  # (jobs done, jobs in all runs, what runs now)


class Comparison(Outcome):
    """Every policy's run on one workload beside the bounds, with the reports of them."""

    def table(self, *, queued: "Comparison | None" = None) -> str:
        """The figures as a text table (`autoscaler simulate` prints it); `queued`: the same
        workload run with every job preemptible, shown as rows of their own."""
        return report.table(self, queued=queued)

    def to_json(self, *, jobs: bool = False) -> dict[str, object]:
        """The figures as `autoscaler simulate -o json` prints them; `jobs`: every job's too."""
        return report.to_json(self, jobs=jobs)


def run_policy(
    choice: PolicyChoice,
    *,
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    config: SimConfig,
    progress: Callable[[int], None] | None = None,
    goodput: GoodputWorkload | None = None,
) -> PolicyRun:
    """Simulate the workload with the engine deciding by `choice`; `progress(jobs done)`;
    `goodput`: the workload's jobs progress by goodput (`workload` and `profiles` are its own)."""
    policy = built(choice)
    reporting = reporting_of(policy)
    models = None if goodput is None else goodput.progress_models(adapting=choice.adapts_batch)
    config = replace(config, preemptible=True) if choice.holds_back else config
    config = replace(config, oracle=True) if choice.oracle and goodput is not None else config
    sim = Simulation(workload=workload, profiles=profiles, config=config, goodput=models)
    engine = Engine(
        cluster=sim.cluster,
        throughput=sim.throughput,
        goodput=sim.gradients,
        policy=policy,
        policy_name=choice.name,
        config=engine_config(config, policy=choice.plugin, config=choice.config),
        objective=reporting.objective,
        model=reporting.model,
    )
    solves: list[float] = []
    fallbacks = 0

    def decide(now: datetime) -> None:
        nonlocal fallbacks
        report = engine.run_once(now=now)
        solves.append(report.solve_seconds)
        fallbacks += bool(report.fallback)
        if progress is not None:
            ended = (Phase.FINISHED, Phase.REJECTED)
            progress(sum(job.phase in ended for job in sim.state.jobs))

    try:
        result = sim.run(decide_round=decide)
    finally:
        engine.close()
    if progress is not None:
        progress(len(workload))
    return PolicyRun(
        name=choice.name,
        result=result,
        solve_seconds=tuple(solves),
        fallbacks=fallbacks,
        model="oracle" if config.oracle else model_of(choice),
    )


def compare(
    *,
    workload: Sequence[WorkloadJob] | Path | str | None = None,
    profiles: Mapping[str, Profile] | Path | str | None = None,
    policies: Iterable[str | PolicyChoice] = DEFAULT_POLICIES,
    config: SimConfig | None = None,
    progress: Progress | None = None,
    workers: int = 1,
    torchft_effect: bool = False,
) -> Comparison:
    """Run every policy on the workload and compare them.

    `workload`/`profiles`: loaded ones, or paths (formats in `autoscaler.sim.inputs`), or None
    for the bundled default; `config` defaults to the bundled cluster (64 GPUs, 8 per node).
    `workers` > 1 runs policies in that many processes at once; `torchft_effect`: also run the
    default policy (else the first) with every job in torchft mode. Raises `SimInputError` for bad
    input and `PolicyError` for a policy that cannot be loaded or configured.
    """
    if profiles is None or isinstance(profiles, str | Path):
        folder = Path(profiles) if profiles is not None else None
        loaded = read_profiles(folder)
    else:
        folder, loaded = None, dict(profiles)
    if workload is None or isinstance(workload, str | Path):
        path = Path(workload) if workload is not None else None
        jobs = read_workload(path, profiles=loaded, traces=folder)
    else:
        jobs = tuple(workload)
    settings = config or DEFAULT_CONFIG
    goodput = goodput_workload(jobs, loaded) if settings.goodput else None
    if goodput is not None:
        jobs, loaded = goodput.jobs, dict(goodput.profiles)
    choices = lineup(policies)
    runner = _in_processes if workers > 1 and len(choices) > 1 else _in_turn
    runs = runner(
        choices,
        workload=jobs,
        profiles=loaded,
        config=settings,
        progress=progress,
        workers=workers,
        goodput=goodput,
    )
    first = runs[choices[0].name].result
    rejected = {job.name for job in first.jobs if job.status == "rejected"}
    alone = goodput.alone_seconds(total_gpus=settings.gpus) if goodput is not None else None
    bound = workload_bound(jobs, loaded, total_gpus=settings.gpus, rejected=rejected, alone=alone)
    relaxed = lp_bound(
        jobs, loaded, total_gpus=settings.gpus, rejected=frozenset(rejected), alone=alone
    )
    torchft = None
    if torchft_effect and not settings.torchft:
        every = replace(settings, torchft=True)
        default = next((c for c in choices if c.name == DEFAULT_POLICY), choices[0])
        torchft = run_policy(default, workload=jobs, profiles=loaded, config=every, goodput=goodput)
    return Comparison(
        runs=runs,
        lower_bound=bound,
        lp_bound=relaxed,
        config=settings,
        workload=jobs,
        torchft=torchft,
    )


def _in_turn(
    choices: Sequence[PolicyChoice],
    *,
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    config: SimConfig,
    progress: Progress | None,
    workers: int,
    goodput: GoodputWorkload | None,
) -> dict[str, PolicyRun]:
    runs: dict[str, PolicyRun] = {}
    total = len(choices) * len(workload)
    for index, choice in enumerate(choices):
        label = f"{choice.name} ({index + 1}/{len(choices)})"
        offset = index * len(workload)

        def report(done: int, offset: int = offset, label: str = label) -> None:
            if progress is not None:
                progress(offset + done, total, label)

        runs[choice.name] = run_policy(
            choice,
            workload=workload,
            profiles=profiles,
            config=config,
            progress=report,
            goodput=goodput,
        )
    return runs


_progress_queue: "Queue[tuple[int, int]] | None" = None  # a worker process's link to the parent


def _start_worker(link: "Queue[tuple[int, int]]") -> None:
    global _progress_queue  # noqa: PLW0603 (set once per worker process)
    _progress_queue = link


def _run_in_worker(  # noqa: PLR0917 (a pool task: positional arguments only)
    index: int,
    choice: PolicyChoice,
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    config: SimConfig,
    goodput: GoodputWorkload | None,
) -> PolicyRun:
    def report(done: int) -> None:
        if _progress_queue is not None:
            _progress_queue.put((index, done))

    return run_policy(
        choice,
        workload=workload,
        profiles=profiles,
        config=config,
        progress=report,
        goodput=goodput,
    )


def _in_processes(
    choices: Sequence[PolicyChoice],
    *,
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    config: SimConfig,
    progress: Progress | None,
    workers: int,
    goodput: GoodputWorkload | None,
) -> dict[str, PolicyRun]:
    """The runs in `workers` processes (forked where the platform can: no re-import)."""
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    link: Queue[tuple[int, int]] = context.Queue()
    done = [0] * len(choices)
    total = len(choices) * len(workload)
    with ProcessPoolExecutor(
        max_workers=min(workers, len(choices)),
        mp_context=context,
        initializer=_start_worker,
        initargs=(link,),
    ) as pool:
        futures: list[Future[PolicyRun]] = [
            pool.submit(_run_in_worker, index, choice, workload, profiles, config, goodput)
            for index, choice in enumerate(choices)
        ]
        while True:
            pending = not all(future.done() for future in futures)
            try:
                index, count = link.get(timeout=0.05)
                done[index] = max(done[index], count)
            except queue.Empty:
                if not pending:
                    break
                continue
            if progress is not None:  # 100% only once every run is back
                finished = sum(future.done() for future in futures)
                label = f"{finished}/{len(choices)} policies done"
                progress(min(sum(done), total - 1), total, label)
        runs = {c.name: future.result() for c, future in zip(choices, futures, strict=True)}
    link.close()
    if progress is not None:
        progress(total, total, f"{len(choices)}/{len(choices)} policies done")
    return runs
