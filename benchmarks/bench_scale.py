"""The operator and the policy engine at cluster scale, against a real kube-apiserver + etcd:
`make bench-scale`.

    python -m benchmarks.bench_scale                 # 5,000 jobs on 1,000 nodes (default)
    python -m benchmarks.bench_scale --quick         # 200 jobs, 40 nodes, 60 s soak

One run, one fresh control plane (no kubelet, scheduler or controller-manager: objects only).
The components run as they are deployed, each in its own process: the operator in a child
process (`benchmarks/operator_process.py`) that answers the benchmark's questions over a pipe,
the engine in this process, and the engine's policy in the worker process `autoscaler engine`
calls it in. So the engine's rounds share no interpreter with the operator.

1. create N Nodes (allocatable cpu, memory, 8 `nvidia.com/gpu`; Ready written through the
   status subresource) and M elastic PyTorchJobs (min 1, max 4, one worker of one GPU), from a
   few threads;
2. run the real operator in its process until every job's pod and service exist, then mark every
   worker pod Running through the status subresource, so the jobs become steady;
3. run the real engine (`Engine` with `KubeCluster` and its policy worker, built as
   `autoscaler engine` builds it) for R rounds on a clock advanced by the engine's interval per
   round. Between two rounds the benchmark marks the pods the operator created for a rescale
   Running and waits for the operator to settle, as a kubelet and a real interval would allow;
4. an operator resync of all M jobs, which should write nothing;
5. an RSS soak: engine rounds every interval (real time now) with the operator running, for
   `--soak-seconds`, sampling this process' RSS (the engine's, not the operator's or the policy
   worker's) every second.

Throughput is the only stand-in: `FixedCurves` answers every job with one fixed concave curve of
its running workers. No Prometheus runs, so this measures the control-plane side of a round
(informer caches, policy, settle, `/scale` writes, state annotations, Events), not query time.

A round's time is the engine's round: until its counts are written. Its state saves, which the
engine writes after the counts and does not wait for (its next round does, first), are timed
too: "round + its state saves". Requests per round are the engine Kube's requests between a
round's start and the moment its state saves ended and its Events were sent. A `/scale` write is
one PUT under the resourceVersion the engine's informer read; only a PUT refused with 409 (the
job changed since) is followed by a `/scale` GET and a PUT under the read's version, and that
GET is part of the write (the read half of its retry; the refused PUT counts as a write). The
engine's informers (jobs, nodes, pods) LIST and WATCH on their own threads: each watch counts as
one request when it opens (as `Kube.watch` counts it); their first LIST and WATCH, in round 1,
are reported apart, and later re-watches or re-lists that fall into a round stay in its count.
That is the target's constant, `EXTRA_REQUESTS`: each watch asks the server to end it after
`WATCH_SECONDS` (300 s), so a round shorter than that re-opens each watch at most once, and a
re-list follows only a watch that expired (410) or broke: at most one of each per informer and
round. Writes go out from the engine's writer threads, all through the one counted Kube.

The CPU each process spent during a round (the engine's, its policy worker's, the operator's,
the API server's and etcd's, read from /proc) is reported too: they share the machine's cores,
so a round's time is also what the others take meanwhile. Always exits 0 unless the benchmark
itself breaks; a missed target prints MISSED.
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.cli.engine_command import policy_from, run_round, runner_from
from autoscaler.clients.engine_cluster import NODES, KubeCluster
from autoscaler.clients.kube import PODS, SERVICES, Kube, api_client
from autoscaler.controller.runner import OWNED_SELECTOR, OperatorConfig
from autoscaler.engine.config import EngineConfig, SettleConfig
from autoscaler.engine.engine import Engine
from autoscaler.engine.ports import JobKey, ManagedJob, Progress
from autoscaler.policies.contract import reporting_of
from benchmarks.cluster import (
    count_listed,
    create_namespace,
    install_crd,
    job_manifest,
    job_names,
    run_threads,
    server_pids,
)
from benchmarks.instruments import TimedKube, process_cpu, status_kb
from benchmarks.operator_process import OperatorProcess, Resync
from tests.support.controlplane import ControlPlane, binaries_dir
from tests.support.polling import wait_for

JSON = dict[str, Any]
NAMESPACE = "bench-scale"
GPU = "nvidia.com/gpu"
NODE_ALLOCATABLE = {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}
WORKER_REQUESTS = {"cpu": "4", "memory": "16Gi", GPU: "1"}
MIN_WORKERS, MAX_WORKERS, MAX_RESTARTS = 1, 4, 100
TARGET_P99_MS, TARGET_RSS_GROWTH_PERCENT = 2000.0, 5.0
INFORMERS = 3  # the engine's: jobs, nodes, pods
EXTRA_REQUESTS = 2 * INFORMERS  # a re-watch and a re-list per informer may fall into a round
SCALE_GET = ("GET", "pytorchjobs/{name}/scale")
INFORMER_LISTS = (("GET", "pytorchjobs"), ("GET", "nodes"), ("GET", "pods"))
OPERATOR_CONFIG = OperatorConfig(workers=4, resync_seconds=3600.0, watch_timeout=60)
QUICK = {"jobs": 200, "nodes": 40, "soak_seconds": 60.0}


# -- pure helpers (unit-tested) --------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile: the smallest value with at least p % of values at or below."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def rss_growth_percent(samples: Sequence[tuple[float, float]], *, window: float) -> float:
    """Growth of RSS over a soak: the median of the last `window` s against the median of the
    first `window` s after a warm-up of `window` s (start-up allocations are not a leak).
    `samples` are (seconds since the soak began, RSS)."""
    if not samples:
        raise ValueError("no samples")
    end = samples[-1][0]
    first = [rss for t, rss in samples if window <= t < 2 * window]
    last = [rss for t, rss in samples if t > end - window]
    if not first or 2 * window > end - window:
        raise ValueError(f"a soak of {end:.0f} s is too short for {window:.0f} s windows")
    before = statistics.median(first)
    return (statistics.median(last) - before) / before * 100


def soak_window(soak_seconds: float) -> float:
    """A minute, or a quarter of a shorter soak (warm-up, first and last window must fit)."""
    return min(60.0, soak_seconds / 4)


def summary_line(*, jobs: int, p50_ms: float, p99_ms: float, requests: float, rss: float) -> str:
    return (
        f"scale: jobs {jobs}, round p50 {p50_ms:.0f} ms, p99 {p99_ms:.0f} ms, "
        f"requests/round {requests:.1f}, rss growth {rss:.1f} %"
    )


def concave_throughput(workers: int) -> float:
    """samples/s at `workers` workers: sub-linear (100, 160, 200, 229 for 1-4), as data-parallel
    training slows with more workers' gradient exchange."""
    return 100.0 * workers / (1 + 0.25 * (workers - 1))


# -- the one stand-in ------------------------------------------------------------------------------


class FixedCurves:
    """A `ThroughputSource` answering every job with `concave_throughput` of its running workers
    (none while no worker runs), without Prometheus."""

    def __init__(self, curve: Callable[[int], float] = concave_throughput) -> None:
        self.curve = curve

    def read(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, float | None]:
        return {job.key: self.curve(job.active) if job.active else None for job in jobs}

    def progress(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, Progress]:
        return {}

    @property
    def last_errors(self) -> Mapping[JobKey, str]:
        return {}

    @property
    def window_seconds(self) -> float:
        return 0.0


# -- cluster objects -------------------------------------------------------------------------------


def create_node(kube: Kube, name: str) -> None:
    """A Node object with GPUs, Ready through the status subresource (as a kubelet reports it)."""
    kube.request("POST", NODES.path(), body={"kind": "Node", "metadata": {"name": name}})
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "benchmark"}
    status = {"capacity": NODE_ALLOCATABLE, "allocatable": NODE_ALLOCATABLE, "conditions": [ready]}
    kube.merge_patch(NODES, "", name, {"status": status}, sub="status")


def elastic_job(name: str) -> JSON:
    """One worker of one GPU, elastic from 1 to 4, with torchrun restarts to spend on rescales."""
    job = job_manifest(name, NAMESPACE, MIN_WORKERS)
    job["spec"]["elasticPolicy"].update(maxReplicas=MAX_WORKERS, maxRestarts=MAX_RESTARTS)
    container = job["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": WORKER_REQUESTS, "limits": {GPU: "1"}}
    return job


def mark_pods_running(kube: Kube, op: OperatorProcess, *, threads: int) -> int:
    """Every pending pod the operator's cache holds becomes Running (objects only); returns how
    many. The operator's informer then sees them and updates each job's active count."""
    pending = op.pending_pods()
    running = {"status": {"phase": "Running"}}
    run_threads(
        threads,
        pending,
        lambda name: kube.merge_patch(PODS, NAMESPACE, name, running, sub="status"),
    )
    return len(pending)


# -- the engine's rounds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    seconds: float  # the round: until its counts are written
    with_saves: float  # until its state saves, which the round does not wait for, ended too
    requests: int  # every request of the engine's Kube, informers' included
    writes: int  # PUT /scale (refused ones too), PATCH of the state annotation, POST of Events
    scale_gets: int  # the reads of /scale writes retried after a 409
    informer: int  # informer LISTs and WATCH opens
    rescaled: int  # jobs whose count was written
    cpu: Mapping[str, float] = field(default_factory=dict)  # CPU s of each process in the round

    @property
    def excess(self) -> int:
        """Requests beyond the writes and the /scale reads that follow refused writes (each
        such GET and the PUT after it are the retry of one write)."""
        return self.requests - self.writes - self.scale_gets


def engine_config(interval: float) -> EngineConfig:
    """The engine's default interval; settling and cooldown of one and two intervals, so the
    engine decides and writes within a run of a few dozen rounds."""
    return EngineConfig(
        interval_seconds=interval,
        namespaces=[NAMESPACE],
        settle=SettleConfig(
            settle_seconds=interval,
            stale_after_seconds=10 * interval,
            cooldown_seconds=2 * interval,
            scale_down_stabilization_seconds=2 * interval,
        ),
    )


def build_engine(kube: Kube, config: EngineConfig) -> tuple[Engine, KubeCluster]:
    """As `autoscaler engine` builds it (the policy in a worker process unless the config says
    thread), with `FixedCurves` for Prometheus and no metrics."""
    name, policy = policy_from(config)
    reporting = reporting_of(policy)
    cluster = KubeCluster(kube, namespaces=config.namespaces)
    engine = Engine(
        cluster=cluster,
        throughput=FixedCurves(),
        policy=policy,
        policy_name=name,
        config=config,
        objective=reporting.objective,
        model=reporting.model,
        runner=runner_from(config, name=name, policy=policy),
    )
    return engine, cluster


def round_processes(engine: Engine, others: Mapping[str, int | str]) -> dict[str, int | str]:
    """The processes a round's CPU is read from: the engine's, its policy worker (replaced
    workers get new ids) and `others` (the operator, the API server, etcd)."""
    worker = getattr(engine.runner, "worker_pid", None)
    return {"engine": "self", **({"policy worker": worker} if worker else {}), **others}


def one_round(
    engine: Engine,
    cluster: KubeCluster,
    kube: TimedKube,
    *,
    now: datetime,
    others: Mapping[str, int | str],
) -> Round:
    before = kube.snapshot()
    pids = round_processes(engine, others)
    cpu_before = process_cpu(pids)
    started = time.perf_counter()
    tally = run_round(engine, now=now)  # as `autoscaler engine` runs each round
    seconds = time.perf_counter() - started
    engine.finish_saves()  # what the next round waits for first
    with_saves = time.perf_counter() - started
    cpu_after = process_cpu(pids)
    wait_for(cluster.recorder.idle, timeout=600, what="the round's Events to be sent")
    after = kube.snapshot()
    calls = after.calls - before.calls
    requests = after.requests - before.requests
    watches = requests - sum(calls.values())  # Kube.watch counts a request outside `calls`
    return Round(
        seconds=seconds,
        with_saves=with_saves,
        requests=requests,
        writes=after.writes - before.writes,
        scale_gets=calls[SCALE_GET],
        informer=watches + sum(calls[key] for key in INFORMER_LISTS),
        rescaled=tally.written,
        cpu={name: cpu_after[name] - cpu_before[name] for name in cpu_after if name in cpu_before},
    )


def between_rounds(op: OperatorProcess, bench: Kube, args: argparse.Namespace) -> None:
    """What a kubelet and the interval do: new pods run, the operator catches up."""
    mark_pods_running(bench, op, threads=args.threads)
    op.wait_quiet(quiet=args.quiet, timeout=args.timeout)


def timed_rounds(
    engine: Engine,
    cluster: KubeCluster,
    kube: TimedKube,
    *,
    op: OperatorProcess,
    bench: Kube,
    args: argparse.Namespace,
    start: datetime,
    others: Mapping[str, int | str],
) -> tuple[list[Round], datetime]:
    rounds, now = [], start
    for i in range(args.rounds):
        rounds.append(one_round(engine, cluster, kube, now=now, others=others))
        r = rounds[-1]
        print(
            f"  round {i + 1}: {r.seconds * 1000:.0f} ms ({r.with_saves * 1000:.0f} ms with its "
            f"state saves), {r.requests} requests, {r.writes} "
            f"writes, {r.scale_gets} /scale GETs, {r.informer} informer, {r.rescaled} rescaled",
            flush=True,
        )
        between_rounds(op, bench, args)
        now += timedelta(seconds=engine.config.interval_seconds)
    return rounds, now


@dataclass
class Soak:
    samples: list[tuple[float, float]] = field(default_factory=list)  # (s, RSS MB)
    rounds: list[Round] = field(default_factory=list)


def soak(
    engine: Engine,
    cluster: KubeCluster,
    kube: TimedKube,
    *,
    op: OperatorProcess,
    bench: Kube,
    args: argparse.Namespace,
    start: datetime,
    others: Mapping[str, int | str],
) -> Soak:
    """Rounds every interval for `--soak-seconds`, the clock going on from `start` in real time;
    a thread samples RSS every second meanwhile."""
    out, stop = Soak(), threading.Event()
    began = time.monotonic()

    def sample() -> None:
        while not stop.wait(1.0):
            out.samples.append((time.monotonic() - began, status_kb("VmRSS") / 1024))

    sampler = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    sampler.start()
    interval = engine.config.interval_seconds
    while time.monotonic() - began < args.soak_seconds:
        round_began = time.monotonic()
        now = start + timedelta(seconds=round_began - began)
        out.rounds.append(one_round(engine, cluster, kube, now=now, others=others))
        between_rounds(op, bench, args)
        left = args.soak_seconds - (time.monotonic() - began)
        time.sleep(max(0.0, min(interval - (time.monotonic() - round_began), left)))
    stop.set()
    sampler.join()
    return out


# -- phases ----------------------------------------------------------------------------------------


def populate(admin: Kube, args: argparse.Namespace) -> float:
    """Nodes and jobs from `--threads` threads; returns the seconds it took."""
    started = time.perf_counter()
    run_threads(
        args.threads, [f"node-{i:05d}" for i in range(args.nodes)], lambda n: create_node(admin, n)
    )
    template = elastic_job("x")

    def create_job(name: str) -> None:
        job = copy.deepcopy(template)
        job["metadata"]["name"] = name
        admin.create(job)

    run_threads(args.threads, job_names(args.jobs), create_job)
    return time.perf_counter() - started


def operator_until_steady(
    op: OperatorProcess, bench: Kube, args: argparse.Namespace
) -> dict[str, float]:
    """Until every job's pod and service exist (the caches, confirmed by a LIST), then until
    every pod runs and the operator has written what that changes."""
    out: dict[str, float] = {}
    started = time.perf_counter()
    wait_for(
        lambda: min(op.cached_pods_and_services()) >= args.jobs,
        timeout=args.timeout,
        interval=0.5,
        what="every job's pod and service in the operator's caches",
    )
    pods = count_listed(bench, PODS, NAMESPACE, OWNED_SELECTOR)
    services = count_listed(bench, SERVICES, NAMESPACE, OWNED_SELECTOR)
    if pods < args.jobs or services < args.jobs:
        raise RuntimeError(
            f"the caches counted {args.jobs} pods, a LIST {pods} ({services} services)"
        )
    out["created_seconds"] = time.perf_counter() - started
    marked = mark_pods_running(bench, op, threads=args.threads)
    op.wait_quiet(quiet=args.quiet, timeout=args.timeout)
    out["steady_seconds"] = time.perf_counter() - started
    out["marked_running"] = marked
    out["jobs_active"] = op.jobs_active()
    return out


# -- report ----------------------------------------------------------------------------------------


@dataclass
class Figures:
    rows: list[tuple[str, str, str, str]] = field(
        default_factory=lambda: [("figure", "value", "target", "met?")]
    )

    def row(self, figure: str, value: str, target: str = "", met: bool | None = None) -> None:
        verdict = "" if met is None else ("MET" if met else "MISSED")
        self.rows.append((figure, value, target, verdict))

    def print(self) -> None:
        widths = [max(len(r[i]) for r in self.rows) for i in range(4)]
        for r in self.rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


@dataclass(frozen=True)
class Summary:
    p50_ms: float
    p99_ms: float
    requests: float
    writes: float
    max_excess: int
    rss_growth: float


def summarize(rounds: Sequence[Round], soaked: Soak, *, window: float) -> Summary:
    """Figures of the rounds after the first (which starts the informers)."""
    steady = list(rounds[1:]) or list(rounds)
    times = [r.seconds * 1000 for r in steady]
    return Summary(
        p50_ms=percentile(times, 50),
        p99_ms=percentile(times, 99),
        requests=statistics.mean(r.requests for r in steady),
        writes=statistics.mean(r.writes for r in steady),
        max_excess=max(r.excess for r in steady),
        rss_growth=rss_growth_percent(soaked.samples, window=window),
    )


def report(
    args: argparse.Namespace,
    setup: dict[str, float],
    rounds: Sequence[Round],
    resync: Resync,
    soaked: Soak,
    *,
    events_dropped: int,
) -> Summary:
    window = soak_window(args.soak_seconds)
    s = summarize(rounds, soaked, window=window)
    first, steady = rounds[0], rounds[1:] or rounds
    f = Figures()
    f.row("create nodes + jobs", f"{setup['populate_seconds']:.1f} s ({args.threads} threads)")
    f.row("operator: every pod + service exist", f"{setup['created_seconds']:.1f} s")
    f.row(
        "operator: pods Running, settled",
        f"{setup['steady_seconds']:.1f} s ({setup['jobs_active']:.0f}/{args.jobs} jobs active)",
    )
    f.row(
        "round 1 (informers' first LIST+WATCH)",
        f"{first.seconds * 1000:.0f} ms, {first.requests} requests ({first.informer} informer), "
        f"{first.writes} writes, {first.rescaled} rescaled",
    )
    f.row(f"round time p50 (rounds 2-{len(rounds)})", f"{s.p50_ms:.0f} ms")
    f.row(
        "round time p99",
        f"{s.p99_ms:.0f} ms",
        f"< {TARGET_P99_MS:.0f} ms",
        s.p99_ms < TARGET_P99_MS,
    )
    f.row("round time max", f"{max(r.seconds for r in steady) * 1000:.0f} ms")
    saved = [r.with_saves * 1000 for r in steady]
    f.row(
        "round + its state saves p50 / p99",
        f"{percentile(saved, 50):.0f} ms / {percentile(saved, 99):.0f} ms",
    )
    f.row("round time, rounds that wrote nothing", _times([r for r in steady if not r.writes]))
    f.row("round time, rounds that wrote", _times([r for r in steady if r.writes]))
    f.row("CPU of a round by process, median (min-max)", cpu_summary(steady))
    f.row(
        "requests/round (mean)",
        f"{s.requests:.1f} ({statistics.mean(r.scale_gets for r in steady):.1f} /scale GETs "
        "after a 409, "
        f"{statistics.mean(r.informer for r in steady):.1f} informer)",
    )
    f.row(
        "writes/round (mean, max)",
        f"{s.writes:.1f}, {max(r.writes for r in steady)} "
        f"({sum(r.rescaled for r in rounds)} rescales in {len(rounds)} rounds)",
    )
    f.row(
        "requests - writes - /scale GETs, worst round",
        f"{s.max_excess}",
        f"<= {EXTRA_REQUESTS}",
        s.max_excess <= EXTRA_REQUESTS,
    )
    f.row("Events dropped (recorder queue full)", f"{events_dropped}")
    f.row(
        "operator resync: writes",
        f"{resync.writes} ({resync.passes:.0f} passes, {resync.seconds:.1f} s)",
        "0",
        resync.writes == 0,
    )
    soak_times = [r.seconds * 1000 for r in soaked.rounds]
    f.row(
        "soak",
        f"{args.soak_seconds:.0f} s, {len(soaked.rounds)} rounds every "
        f"{args.interval:.0f} s, p99 {percentile(soak_times, 99):.0f} ms (with the state saves "
        f"{percentile([r.with_saves * 1000 for r in soaked.rounds], 99):.0f} ms), "
        f"{sum(r.writes for r in soaked.rounds)} writes",
    )
    rss = [mb for _, mb in soaked.samples]
    f.row(
        f"RSS growth (median of last {window:.0f} s vs {window:.0f}-{2 * window:.0f} s)",
        f"{s.rss_growth:+.1f} % (RSS {min(rss):.0f}-{max(rss):.0f} MB)",
        f"< {TARGET_RSS_GROWTH_PERCENT:.0f} %",
        s.rss_growth < TARGET_RSS_GROWTH_PERCENT,
    )
    print()
    print(
        f"bench-scale: {args.jobs} jobs on {args.nodes} nodes, {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    f.print()
    print()
    return s


def cpu_summary(rounds: Sequence[Round]) -> str:
    """Each process's CPU seconds in a round: the machine's cores are what rounds share."""
    names = dict.fromkeys(name for r in rounds for name in r.cpu)
    parts = []
    for name in names:
        seconds = [r.cpu[name] for r in rounds if name in r.cpu]
        low, mid, high = min(seconds), statistics.median(seconds), max(seconds)
        parts.append(f"{name} {mid:.2f} s ({low:.2f}-{high:.2f})")
    return ", ".join(parts)


def _times(rounds: Sequence[Round]) -> str:
    """p50 and max round time of `rounds`, with their mean writes and ms per write."""
    if not rounds:
        return "none"
    times = [r.seconds * 1000 for r in rounds]
    writes = statistics.mean(r.writes for r in rounds)
    text = (
        f"{len(rounds)} rounds: p50 {percentile(times, 50):.0f} ms, max {max(times):.0f} ms, "
        f"{writes:.0f} writes each"
    )
    total = sum(r.writes for r in rounds)
    return f"{text}, {sum(times) / total:.1f} ms of round per write" if total else text


# -- main ------------------------------------------------------------------------------------------


DEFAULTS = {"jobs": 5000, "nodes": 1000, "soak_seconds": 600.0}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, help="elastic PyTorchJobs (5000; --quick 200)")
    parser.add_argument("--nodes", type=int, help="Nodes of 8 GPUs (1000; --quick 40)")
    parser.add_argument("--rounds", type=int, default=10, help="timed engine rounds (10)")
    parser.add_argument("--soak-seconds", type=float, help="RSS soak (600; --quick 60)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 jobs, 40 nodes")
    parser.add_argument(
        "--interval",
        type=float,
        default=EngineConfig().interval_seconds,
        help="engine interval, s (the engine's default)",
    )
    parser.add_argument("--threads", type=int, default=4, help="object-creating threads (4)")
    parser.add_argument("--quiet", type=float, default=1.0, help="s without requests = settled")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per-phase limit, s")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's workdir")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def run(plane: ControlPlane, args: argparse.Namespace, clients: list[Kube]) -> Summary:
    kubeconfig = str(plane.kubeconfig_path)

    def client() -> TimedKube:
        kube = TimedKube(api_client(kubeconfig=kubeconfig))
        clients.append(kube)
        return kube

    admin, engine_kube = client(), client()
    install_crd(admin)
    create_namespace(admin, NAMESPACE)
    print(f"creating {args.nodes} nodes and {args.jobs} jobs ...", flush=True)
    setup: dict[str, float] = {"populate_seconds": populate(admin, args)}

    print("operator: until every pod exists, then runs ...", flush=True)
    with OperatorProcess.start(kubeconfig, OPERATOR_CONFIG) as op:
        setup |= operator_until_steady(op, admin, args)
        print(f"engine: {args.rounds} rounds ...", flush=True)
        engine, cluster = build_engine(engine_kube, engine_config(args.interval))
        try:
            start = datetime.now(UTC)
            others = {"operator": op.pid, **server_pids(plane)}
            rounds, clock = timed_rounds(
                engine, cluster, engine_kube, op=op, bench=admin, args=args, start=start,
                others=others,
            )  # fmt: skip
            print("operator: resync of every job ...", flush=True)
            resynced = op.noop_resync(quiet=args.quiet, timeout=args.timeout)
            events_dropped = cluster.recorder.dropped
            print(
                f"soak: {args.soak_seconds:.0f} s of rounds every {args.interval:.0f} s ...",
                flush=True,
            )
            gc.collect()
            soaked = soak(
                engine, cluster, engine_kube, op=op, bench=admin, args=args, start=clock,
                others=others,
            )  # fmt: skip
        finally:
            engine.close()
            cluster.close()
    return report(args, setup, rounds, resynced, soaked, events_dropped=events_dropped)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    plane = ControlPlane(bin_dir=binaries_dir())
    print(f"starting etcd + kube-apiserver in {workdir} ...", flush=True)
    plane.start(workdir)
    clients: list[Kube] = []
    try:
        summary = run(plane, args, clients)
    finally:
        for kube in clients:
            kube.close()
        plane.stop(remove_workdir=not args.keep)
    print(
        summary_line(
            jobs=args.jobs,
            p50_ms=summary.p50_ms,
            p99_ms=summary.p99_ms,
            requests=summary.requests,
            rss=summary.rss_growth,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
