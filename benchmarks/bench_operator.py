"""The operator at scale against a real kube-apiserver + etcd, and upstream's beside it:
`make bench-operator`.

    python -m benchmarks.bench_operator --jobs 500 --workers 8     # the target size (default)
    python -m benchmarks.bench_operator --jobs 20 --workers 2      # a quick smoke run

Two fresh control planes, one after the other (the second starts once the first has stopped,
so the two runs never share the cores). On the first, four phases:

1. baseline: create the same jobs x workers pods and headless services (the very bodies the
   operator would send) straight through the API server from a few threads, no operator; then
   delete them;
2. operator: start this operator (in this process, `--operator-workers` workers, no client-side
   rate limit), create the jobs as a user script would (a few threads), and time until every
   pod exists (the operator's caches, confirmed by a label-selected LIST) and until every pod
   and service is stored (the completion criterion below);
3. settle: wait until the queue is empty and nothing is written for a while;
4. no-op resync: `Operator.resync()`, wait for one pass per job, count the writes (target 0).

On the second, upstream's operator (kubeflow/training-operator v1.9.4, built by
testenv/build-training-operator.sh), started by `tests/support/upstream_operator` as upstream
installs it (only the PyTorchJob scheme, its validating webhook on job creates) with
`--controller-threads` = `--operator-workers` and its `--kube-api-qps`/`--kube-api-burst` lifted
so that neither operator is throttled by its own client; the same CRD (this repository's), the
same jobs, created the same way, timed the same way.

Completion criterion, the same for both: from the first job create until the API server stores
jobs x workers pods and as many services in the jobs' namespace (each counted by a LIST of one
item and its `remainingItemCount`, polled every 50 ms). API writes per job: the create, update,
patch and delete requests the API server's audit log records in the jobs' namespace from the
operator's User-Agent (ours is given one of its own; upstream's is client-go's default,
`training-operator/...`), until it settled (ours: its queue idle and no request for `--quiet` s,
then its no-op resync; upstream: no audited write for 5 s), divided by the jobs.

Prints figures, targets and ratios against the baseline measured in this same run (machines
are shared and noisy: compare ratios, not seconds, between runs), then one line
`operator: ours X s, upstream Y s (ratio R), writes ours A, upstream B`. Targets against
upstream: R <= 1 and A <= B. Exits 1 when a target is missed (each printed MISSED).
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import PODS, SERVICES, Kube, api_client
from autoscaler.controller.reconcile import Observed, plan
from autoscaler.controller.runner import OWNED_SELECTOR, Operator, OperatorConfig
from benchmarks import audit
from benchmarks.cluster import (
    POLL,
    NoopResync,
    all_stored,
    count_listed,
    create_namespace,
    install_crd,
    job_manifest,
    job_names,
    noop_resync,
    run_threads,
    server_pids,
    wait_quiet,
)
from benchmarks.instruments import (
    KubeStats,
    Sampler,
    TimedKube,
    diff,
    maxrss_mb,
    process_cpu,
    reset_peak_rss,
    status_kb,
    thread_cpu,
)
from tests.support.controlplane import ControlPlane, binaries_dir
from tests.support.polling import wait_for
from tests.support.upstream_operator import UpstreamOperator, training_operator_binary

JSON = dict[str, Any]
BASELINE_NS, OPERATOR_NS = "bench-baseline", "bench-operator"
TARGET_SECONDS, TARGET_RSS_MB, TARGET_RESYNC_WRITES = 60.0, 300.0, 0
OURS_AGENT, USER_AGENT = "autoscaler-operator-bench", "bench-user"
UPSTREAM_AGENT = "training-operator/"  # client-go's default: the binary's name, then versions
UNTHROTTLED = 1_000_000  # upstream's --kube-api-qps/burst: no client-side limit, as ours here
AUDIT_QUIET = 5.0  # s without an audited write by upstream's operator = settled
TICKS = os.sysconf("SC_CLK_TCK")


# -- phases ----------------------------------------------------------------------------------------


@dataclass
class Results:
    jobs: int
    workers: int
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    def row(
        self, figure: str, value: str, target: str = "", met: bool | None = None, ratio: str = ""
    ) -> None:
        verdict = "" if met is None else ("met" if met else "MISSED")
        if met is False:
            self.missed.append(figure)
        self.rows.append((figure, value, target, verdict, ratio))


@dataclass(frozen=True)
class Cpu:
    """CPU seconds over a phase: this process's, the API server's and etcd's."""

    python: float
    apiserver: float
    etcd: float


@dataclass(frozen=True)
class Baseline:
    """Raw creates of the operator's pod and service bodies: what the operator is measured
    against."""

    seconds: float
    objects: int
    pods_listed: int
    cpu: Cpu
    stats: KubeStats
    cleanup_seconds: float
    maxrss_mb: float = 0.0  # the phase's peak RSS, read once it is over


@dataclass(frozen=True)
class Creation:
    """The jobs created like a user script, timed from the first create."""

    at_pods: KubeStats  # the operator client's tallies when every pod existed
    pods_seconds: float
    services_seconds: float
    stored_seconds: float
    jobs_created_seconds: float
    pods_done: bool  # every pod existed before --timeout
    settled_seconds: float
    cpu: Cpu
    thread_cpu: dict[str, float]


@dataclass(frozen=True)
class OperatorRun:
    """Our operator from its start to a no-op resync after everything settled."""

    created: Creation
    resync: NoopResync
    rss_before_operator_mb: float
    hwm_reset: bool
    sync_seconds: float
    sampler: Sampler | None
    jobs_with_status: int
    pods_listed: int
    services_listed: int
    peak_hwm_mb: float
    maxrss_mb: float
    phases: dict[str, KubeStats]
    total_to_settle: KubeStats
    informer_sizes: dict[str, int]
    audited_writes: dict[tuple[str, str], int] = field(default_factory=dict)  # read once it stopped


@dataclass(frozen=True)
class UpstreamRun:
    """Upstream's operator on the same jobs, timed to the same criterion."""

    stored_seconds: float
    stored_done: bool
    writes: dict[tuple[str, str], int]  # its audited writes by (verb, resource)
    events_recorded: int = 0  # read from its log once it stopped


def baseline(kube: TimedKube, args: argparse.Namespace) -> Baseline:
    """Raw creates of the operator's own pod and service bodies, `--baseline-threads` at once.

    Bodies come from `reconcile.plan` for each job (as the operator sends them) in a separate
    namespace, with the operator-name label changed so the operator's informers never list them.
    """
    template = job_manifest("x", BASELINE_NS, args.workers)

    def bodies(name: str) -> list[JSON]:
        job = copy.deepcopy(template)
        job["metadata"].update(name=name, uid=f"00000000-0000-0000-0000-{hash(name) % 10**12:012d}")
        objects = [o for o in plan(job, Observed(), now=datetime.now(UTC)).create]
        for obj in objects:
            obj["metadata"]["labels"][c.LABEL_OPERATOR_NAME] = (
                "bench-baseline-ignore"  # same length as the real value
            )
        return [o for o in objects if o["kind"] in ("Pod", "Service")]

    def create_all(name: str) -> None:
        for obj in bodies(name):  # built lazily per job: the baseline holds no big list
            kube.create(obj)

    before = kube.snapshot()
    started = time.perf_counter()
    cpu0 = cpu_now(args)
    run_threads(args.baseline_threads, job_names(args.jobs), create_all)
    seconds = time.perf_counter() - started
    cpu = cpu_since(cpu0, args)
    objects = args.jobs * args.workers * 2
    pods_listed = count_listed(kube, PODS, BASELINE_NS, f"{c.LABEL_OPERATOR_NAME}")
    stats = diff(kube.snapshot(), before)
    # Clear them (unscheduled pods go at once) so both phases run against similar stores.
    cleanup = time.perf_counter()
    for kind in (PODS, SERVICES):
        kube.request(
            "DELETE", kind.path(BASELINE_NS), body={"kind": "DeleteOptions", "apiVersion": "v1"}
        )
    wait_for(
        lambda: count_listed(kube, PODS, BASELINE_NS, c.LABEL_OPERATOR_NAME) == 0,
        timeout=300,
        what="the baseline pods to be deleted",
    )
    return Baseline(
        seconds=seconds,
        objects=objects,
        pods_listed=pods_listed,
        cpu=cpu,
        stats=stats,
        cleanup_seconds=time.perf_counter() - cleanup,
    )


_SERVER_PIDS: dict[str, int] = {}


def server_cpu(args: argparse.Namespace) -> tuple[float, float]:
    cpu = process_cpu(_SERVER_PIDS)
    return cpu.get("apiserver", 0.0), cpu.get("etcd", 0.0)


def cpu_now(args: argparse.Namespace) -> Cpu:
    return Cpu(time.process_time(), *server_cpu(args))


def cpu_since(start: Cpu, args: argparse.Namespace) -> Cpu:
    now = cpu_now(args)
    return Cpu(now.python - start.python, now.apiserver - start.apiserver, now.etcd - start.etcd)


def operator_run(
    op_kube: TimedKube, user: TimedKube, bench: Kube, args: argparse.Namespace, res: Results
) -> OperatorRun:
    gc.collect()
    rss_before_operator_mb = status_kb("VmRSS") / 1024
    maxrss_before_reset_mb = maxrss_mb()
    hwm_reset = reset_peak_rss()

    op = Operator(
        op_kube,
        config=OperatorConfig(
            workers=args.operator_workers, resync_seconds=3600.0, watch_timeout=60
        ),
    )
    stop = threading.Event()
    thread = threading.Thread(target=op.run, args=(stop,), name="operator", daemon=True)
    s0 = op_kube.snapshot()
    started = time.perf_counter()
    thread.start()
    wait_for(op.healthy, timeout=60, what="the operator's caches to sync")
    sync_seconds = time.perf_counter() - started
    s1 = op_kube.snapshot()
    sampler = Sampler() if args.profile else None
    if sampler:
        sampler.start()

    created = create_and_wait(op, user=user, bench=bench, args=args, res=res)
    s2 = created.at_pods
    s3 = op_kube.snapshot()
    if sampler:
        sampler.stop()
    jobs = op.jobs.items()
    jobs_with_status = sum(bool((j.get("status") or {}).get("conditions")) for j in jobs)
    pods_listed = count_listed(bench, PODS, OPERATOR_NS, OWNED_SELECTOR)
    services_listed = count_listed(bench, SERVICES, OPERATOR_NS, OWNED_SELECTOR)
    resync = noop_resync(op, op_kube, args, jobs=len(jobs))

    run = OperatorRun(
        created=created,
        resync=resync,
        rss_before_operator_mb=rss_before_operator_mb,
        hwm_reset=hwm_reset,
        sync_seconds=sync_seconds,
        sampler=sampler,
        jobs_with_status=jobs_with_status,
        pods_listed=pods_listed,
        services_listed=services_listed,
        peak_hwm_mb=status_kb("VmHWM") / 1024,
        maxrss_mb=max(maxrss_before_reset_mb, maxrss_mb()),
        phases={
            "sync": diff(s1, s0),
            "create (until every pod exists)": diff(s2, s1),
            "settle": diff(s3, s2),
            "no-op resync": diff(resync.after, resync.before),
        },
        total_to_settle=diff(s3, s1),
        informer_sizes={inf.resource.plural: len(inf.items()) for inf in op.informers},
    )

    stop.set()
    thread.join(timeout=60)
    return run


def create_and_wait(
    op: Operator,
    *,
    user: TimedKube,
    bench: Kube,
    args: argparse.Namespace,
    res: Results,
) -> Creation:
    """Create the jobs like a user script; time until every pod exists, then until settled."""
    op_kube: Any = op.kube
    n, m = args.jobs, args.workers
    template = job_manifest("x", OPERATOR_NS, m)

    def create_job(name: str) -> None:
        job = copy.deepcopy(template)
        job["metadata"]["name"] = name
        user.create(job)

    cpu0 = cpu_now(args)
    threads0 = thread_cpu()
    t0 = time.perf_counter()
    creator = threading.Thread(
        target=run_threads,
        args=(args.user_threads, job_names(n), create_job),
        name="bench-user",
        daemon=True,
    )
    creator.start()
    expected = n * m
    pods_at = services_at = stored_at = None
    jobs_created_at = None
    deadline = t0 + args.timeout
    while time.perf_counter() < deadline:
        now = time.perf_counter()
        if jobs_created_at is None and not creator.is_alive():
            jobs_created_at = now
        if (
            pods_at is None
            and len(op.pods.items()) >= expected  # the caches say so: confirm with the server
            and count_listed(bench, PODS, OPERATOR_NS, OWNED_SELECTOR) >= expected
        ):
            pods_at = now
        if services_at is None and len(op.services.items()) >= expected:
            services_at = now
        if stored_at is None and all_stored(bench, OPERATOR_NS, expected):
            stored_at = now
        if None not in (pods_at, services_at, stored_at, jobs_created_at):
            break
        time.sleep(POLL)
    creator.join(timeout=60)
    at_pods = op_kube.snapshot()
    if pods_at is None:
        res.notes.append(f"not every pod existed after --timeout {args.timeout:.0f}s")
    pods_seconds = (pods_at or time.perf_counter()) - t0
    services_seconds = (services_at or time.perf_counter()) - t0
    stored_seconds = (stored_at or time.perf_counter()) - t0
    jobs_created_seconds = (jobs_created_at or time.perf_counter()) - t0

    settled_at = wait_quiet(op, op_kube, quiet=args.quiet, timeout=args.timeout)
    cpu = cpu_since(cpu0, args)
    threads1 = thread_cpu()
    return Creation(
        at_pods=at_pods,
        pods_seconds=pods_seconds,
        services_seconds=services_seconds,
        stored_seconds=stored_seconds,
        jobs_created_seconds=jobs_created_seconds,
        pods_done=pods_at is not None,
        settled_seconds=settled_at - t0,
        cpu=cpu,
        thread_cpu={k: v - threads0.get(k, 0.0) for k, v in threads1.items()},
    )


def upstream_run(args: argparse.Namespace, res: Results) -> UpstreamRun:
    """Upstream's operator on a control plane of its own, fresh, as installed by
    `tests/support/upstream_operator` (its validating webhook included), the same jobs created
    the same way; timed to the same criterion, its writes read from the same audit log."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-upstream-"))
    plane = ControlPlane(bin_dir=binaries_dir(), apiserver_flags=audit.flags(workdir / "audit"))
    print(f"upstream: starting a fresh etcd + kube-apiserver in {workdir} ...", flush=True)
    plane.start(workdir / "plane")
    kubeconfig = str(plane.kubeconfig_path)
    admin, user = Kube(api_client(kubeconfig=kubeconfig)), agent_kube(kubeconfig, USER_AGENT)
    try:
        install_crd(admin)
        create_namespace(admin, OPERATOR_NS)
        manager = UpstreamOperator(
            binary=training_operator_binary(),
            kube=admin,
            kubeconfig=plane.kubeconfig_path,
            workdir=workdir / "manager",
            namespace="kubeflow",
            flags=(
                f"--controller-threads={args.operator_workers}",
                f"--kube-api-qps={UNTHROTTLED}",
                f"--kube-api-burst={UNTHROTTLED}",
            ),
        )
        manager.start()
        try:
            print(f"upstream: {args.jobs} jobs x {args.workers} workers ...", flush=True)
            log = audit.AuditLog(
                workdir / "audit" / "audit.log", agent=UPSTREAM_AGENT, namespace=OPERATOR_NS
            )
            out = create_and_count(user, admin, log, args, res)
            return replace(out, events_recorded=events_recorded(manager.log))
        finally:
            manager.stop()
    finally:
        for kube in (admin, user):
            kube.close()
        plane.stop(remove_workdir=not args.keep)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)  # the audit log and the manager's log


def events_recorded(log: Path) -> int:
    """The Events upstream's manager recorded: its event recorder logs each one (zap's development
    mode, upstream's default), whether or not its sink then writes it."""
    with log.open(errors="replace") as lines:
        return sum("\tevents\t" in line for line in lines)


def create_and_count(
    user: Kube, bench: Kube, log: audit.AuditLog, args: argparse.Namespace, res: Results
) -> UpstreamRun:
    """Create the jobs as `create_and_wait` does; time until `all_stored`, then until the
    operator's audited writes stop for `--quiet` s (its caches and queue are not ours to read)."""
    template = job_manifest("x", OPERATOR_NS, args.workers)

    def create_job(name: str) -> None:
        job = copy.deepcopy(template)
        job["metadata"]["name"] = name
        user.create(job)

    expected = args.jobs * args.workers
    t0 = time.perf_counter()
    creator = threading.Thread(  # polled while it creates, as in `create_and_wait`
        target=run_threads,
        args=(args.user_threads, job_names(args.jobs), create_job),
        name="bench-user",
        daemon=True,
    )
    creator.start()
    stored_at = None
    deadline = t0 + args.timeout
    while time.perf_counter() < deadline:
        if all_stored(bench, OPERATOR_NS, expected):
            stored_at = time.perf_counter()
            break
        time.sleep(POLL)
    creator.join(timeout=60)
    if stored_at is None:
        res.notes.append(f"upstream: not every pod and service after --timeout {args.timeout:.0f}s")
    last, changed = log.poll(), time.perf_counter()
    while time.perf_counter() - changed < max(args.quiet, AUDIT_QUIET):
        if time.perf_counter() > deadline:
            res.notes.append("upstream: its writes had not stopped by --timeout")
            break
        time.sleep(POLL)
        if (now := log.poll()) != last:
            last, changed = now, time.perf_counter()
    return UpstreamRun(
        stored_seconds=(stored_at or time.perf_counter()) - t0,
        stored_done=stored_at is not None,
        writes=dict(log.counts),
    )


def agent_kube(kubeconfig: str, agent: str) -> TimedKube:
    """A client whose requests the audit log tells apart by their User-Agent."""
    api = api_client(kubeconfig=kubeconfig)
    api.user_agent = agent
    return TimedKube(api)


# -- report ----------------------------------------------------------------------------------------


def report(
    base: Baseline,
    run: OperatorRun,
    up: UpstreamRun,
    args: argparse.Namespace,
    res: Results,
) -> None:
    n, m = args.jobs, args.workers
    raw, created = base.seconds, run.created
    res.row(
        "baseline: raw create pods+services",
        f"{raw:.1f} s ({base.objects} objects, {base.objects / raw:.0f}/s, "
        f"{args.baseline_threads} threads)",
    )
    res.row(
        "operator: seconds until every pod exists",
        f"{created.pods_seconds:.1f} s",
        f"< {TARGET_SECONDS:.0f} s",
        created.pods_done and created.pods_seconds < TARGET_SECONDS,
        f"{created.pods_seconds / raw:.2f}x raw pods+services",
    )
    res.row(
        "operator: ... every pod and service",
        f"{created.services_seconds:.1f} s",
        "",
        None,
        f"{max(created.services_seconds, created.pods_seconds) / raw:.2f}x raw pods+services",
    )
    res.row(
        "operator: ... and settled (status written, quiet)",
        f"{created.settled_seconds:.1f} s",
        "",
        None,
        f"{created.settled_seconds / raw:.2f}x raw",
    )
    res.row(
        "user: creating the jobs",
        f"{created.jobs_created_seconds:.1f} s ({args.user_threads} threads)",
    )
    total = run.total_to_settle
    create = run.phases["create (until every pod exists)"]
    res.row(
        "operator API requests per job (to settle)",
        f"{total.requests / n:.2f} ({total.writes / n:.2f} writes)",
        f"min {2 * m + 1} writes",
        None,
        f"{total.requests / n / (2 * m):.2f}x raw (2M={2 * m} requests/job)",
    )
    res.row(
        "  ... of which until every pod exists",
        f"{create.requests / n:.2f} ({create.writes / n:.2f} writes)",
    )
    resync = run.phases["no-op resync"]
    res.row(
        "writes during the no-op resync",
        f"{resync.writes} ({resync.requests} requests, {run.resync.passes:.0f} passes, "
        f"{run.resync.seconds:.2f} s)",
        f"= {TARGET_RESYNC_WRITES}",
        resync.writes == TARGET_RESYNC_WRITES and run.resync.passes >= n,
    )
    res.row(
        "peak RSS, whole benchmark process (ru_maxrss)",
        f"{run.maxrss_mb:.0f} MB",
        f"< {TARGET_RSS_MB:.0f} MB",
        run.maxrss_mb < TARGET_RSS_MB,
        f"{run.maxrss_mb / base.maxrss_mb:.2f}x baseline-phase peak ({base.maxrss_mb:.0f} MB)",
    )
    if run.hwm_reset:
        res.row(
            "peak RSS, operator phase (VmHWM reset)",
            f"{run.peak_hwm_mb:.0f} MB",
            f"< {TARGET_RSS_MB:.0f} MB",
            None,
            f"+{run.peak_hwm_mb - run.rss_before_operator_mb:.0f} MB over the "
            f"{run.rss_before_operator_mb:.0f} MB before the operator started",
        )
    bcpu, ocpu = base.cpu, created.cpu
    res.row(
        "CPU s: python / apiserver / etcd",
        f"{ocpu.python:.1f} / {ocpu.apiserver:.1f} / {ocpu.etcd:.1f} (operator run)",
        "",
        None,
        f"baseline {bcpu.python:.1f} / {bcpu.apiserver:.1f} / {bcpu.etcd:.1f}",
    )

    line = compare(run, up, args, res)
    print_table(res, args)
    print_details(base, run, args)
    print_writes(run, up, args)
    for note in res.notes:
        print(f"note: {note}")
    print()
    print(line)
    if res.missed:
        print(f"MISSED: {', '.join(res.missed)}")
    else:
        print("All targets met.")


def compare(run: OperatorRun, up: UpstreamRun, args: argparse.Namespace, res: Results) -> str:
    """The rows against upstream's operator, and the one-line summary."""
    ours_s, theirs_s = run.created.stored_seconds, up.stored_seconds
    ours_w = sum(run.audited_writes.values()) / args.jobs
    theirs_w = sum(up.writes.values()) / args.jobs
    ratio = ours_s / theirs_s
    res.row(
        "vs upstream: every pod + service stored",
        f"ours {ours_s:.1f} s, upstream {theirs_s:.1f} s",
        "ours <= upstream",
        run.created.pods_done and up.stored_done and ratio <= 1.0,
        f"{ratio:.2f}x upstream",
    )
    res.row(
        "vs upstream: API writes per job (audit log)",
        f"ours {ours_w:.1f}, upstream {theirs_w:.1f}",
        "ours <= upstream",
        ours_w <= theirs_w,
        f"{ours_w / theirs_w:.2f}x upstream",
    )
    return (
        f"operator: ours {ours_s:.1f} s, upstream {theirs_s:.1f} s (ratio {ratio:.2f}), "
        f"writes ours {ours_w:.1f}, upstream {theirs_w:.1f}"
    )


def print_writes(run: OperatorRun, up: UpstreamRun, args: argparse.Namespace) -> None:
    print("API writes per job by each operator (the API server's audit log):")
    for who, counts in (("ours", run.audited_writes), ("upstream", up.writes)):
        for (verb, resource), count in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"  {who:8} {verb:7} {resource:28} {count / args.jobs:6.2f}")
    written = sum(n for (verb, resource), n in up.writes.items() if resource == "events")
    print(
        f"  upstream's recorder logged {up.events_recorded / args.jobs:.2f} Events per job and "
        f"wrote {written / args.jobs:.2f}"
    )
    print()


def print_table(res: Results, args: argparse.Namespace) -> None:
    widths = [
        max(len(r[i]) for r in [*res.rows, ("figure", "value", "target", "met?", "ratio")])
        for i in range(5)
    ]
    head = ("figure", "value", "target", "met?", "ratio vs same-run baseline")
    print()
    print(
        f"bench-operator: {res.jobs} jobs x {res.workers} workers, "
        f"{args.operator_workers} operator workers, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=False))
    print(line)
    print("-" * len(line))
    for r in res.rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)).rstrip())
    print()


def print_details(base: Baseline, run: OperatorRun, args: argparse.Namespace) -> None:
    n = args.jobs
    total = run.total_to_settle
    print(
        "Operator API calls, creation to settle (count, mean ms; send = request out + headers "
        "back, rest = body read + json.loads):"
    )
    calls, total_s, send_s = total.calls, total.total_s, total.send_s
    for key, count in sorted(calls.items(), key=lambda kv: -kv[1]):
        mean = total_s.get(key, 0.0) / count * 1000
        send = send_s.get(key, 0.0) / count * 1000
        failed = total.failed.get(key, 0)
        extra = f", {failed} failed" if failed else ""
        print(
            f"  {key[0]:6} {key[1]:28} {count:6}  {mean:6.2f} ms (send {send:.2f}, rest "
            f"{mean - send:.2f}){extra}"
        )
    busy = sum(total_s.values())
    print(
        f"  sum of request time {busy:.1f} s over {args.operator_workers} workers = "
        f"{busy / args.operator_workers:.1f} s per worker (wall to settle "
        f"{run.created.settled_seconds:.1f} s)"
    )
    bcalls = base.stats
    bmean = sum(bcalls.total_s.values()) / max(sum(bcalls.calls.values()), 1) * 1000
    print(
        f"  baseline: mean create {bmean:.2f} ms over {sum(bcalls.calls.values())} calls "
        f"from {args.baseline_threads} threads"
    )
    print()
    print("Python CPU seconds by thread, creation to settle:")
    for name, seconds in sorted(run.created.thread_cpu.items(), key=lambda kv: -kv[1]):
        if seconds >= 0.05:
            print(f"  {name:24} {seconds:6.1f}")
    print(
        f"  informer cache sizes: {run.informer_sizes}; jobs with status: "
        f"{run.jobs_with_status}/{n}; LIST: {run.pods_listed} pods, "
        f"{run.services_listed} services; reconcile errors: {run.resync.errors:.0f}"
    )
    sampler = run.sampler
    if sampler is not None:
        print()
        print("Where threads spend wall time (sampled every 5 ms, creation to settle):")
        for group in sorted(sampler.samples):
            total_samples = sampler.samples[group]
            print(f"  {group} ({total_samples} samples)")
            for what, k in sampler.category[group].most_common(8):
                print(f"    {100 * k / total_samples:5.1f}%  {what}")
            print("    innermost autoscaler frame:")
            for what, k in sampler.ours[group].most_common(args.profile_top):
                print(f"      {100 * k / total_samples:5.1f}%  {what}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_operator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=500, help="PyTorchJobs to create (500)")
    parser.add_argument("--workers", type=int, default=8, help="Worker replicas per job (8)")
    parser.add_argument("--operator-workers", type=int, default=4, help="reconcile workers (4)")
    parser.add_argument("--baseline-threads", type=int, default=4, help="raw-create threads (4)")
    parser.add_argument("--user-threads", type=int, default=4, help="job-creating threads (4)")
    parser.add_argument("--quiet", type=float, default=2.0, help="s without requests = settled")
    parser.add_argument("--timeout", type=float, default=900.0, help="per-phase limit, s")
    parser.add_argument("--profile", action="store_true", help="sample thread stacks (slower)")
    parser.add_argument("--profile-top", type=int, default=12)
    parser.add_argument("--keep", action="store_true", help="keep the control plane's workdir")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    res = Results(args.jobs, args.workers)
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    plane = ControlPlane(bin_dir=binaries_dir(), apiserver_flags=audit.flags(workdir / "audit"))
    print(f"starting etcd + kube-apiserver in {workdir} ...", flush=True)
    plane.start(workdir)
    _SERVER_PIDS.update(server_pids(plane))  # read-only: their CPU time for the report
    kubeconfig = str(plane.kubeconfig_path)
    clients: list[Kube] = []
    try:
        admin = TimedKube(api_client(kubeconfig=kubeconfig))
        clients.append(admin)
        print(
            f"control plane up in {plane.startup_seconds:.1f} s; installing the CRD ...", flush=True
        )
        install_crd(admin)
        for ns in (BASELINE_NS, OPERATOR_NS):
            create_namespace(admin, ns)

        print(f"baseline: raw create of {args.jobs * args.workers} pods + services ...", flush=True)
        raw = TimedKube(api_client(kubeconfig=kubeconfig))
        clients.append(raw)
        gc.collect()
        reset_peak_rss()
        base = replace(baseline(raw, args), maxrss_mb=status_kb("VmHWM") / 1024)
        print(
            f"  {base.seconds:.1f} s (+{base.cleanup_seconds:.1f} s to delete them)",
            flush=True,
        )

        print(f"operator: {args.jobs} jobs x {args.workers} workers ...", flush=True)
        op_kube = agent_kube(kubeconfig, OURS_AGENT)
        user = agent_kube(kubeconfig, USER_AGENT)
        clients += [op_kube, user]
        run = operator_run(op_kube, user, admin, args, res)
        log = audit.AuditLog(
            workdir / "audit" / "audit.log", agent=OURS_AGENT, namespace=OPERATOR_NS
        )
        log.poll()  # after the RSS figures: ours settled and its resync wrote nothing more
        run = replace(run, audited_writes=dict(log.counts))
    finally:
        for kube in clients:
            kube.close()
        plane.stop(remove_workdir=not args.keep)
    up = upstream_run(args, res)  # after ours' plane stopped: the two never share the cores
    report(base, run, up, args, res)
    return 1 if res.missed else 0


if __name__ == "__main__":
    sys.exit(main())
