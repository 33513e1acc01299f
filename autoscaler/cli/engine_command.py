"""`autoscaler engine`, `autoscaler decide` and `autoscaler policies`."""

import argparse
import gc
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from autoscaler.cli.common import add_service_arguments, configure_logging, run_service
from autoscaler.clients.engine_cluster import KubeCluster
from autoscaler.clients.kube import Kube, api_client
from autoscaler.clients.prometheus import PrometheusThroughput
from autoscaler.clients.stopping import stopped_within
from autoscaler.engine.config import EngineConfig, load_config, read_yaml
from autoscaler.engine.engine import Engine
from autoscaler.engine.policy_runner import PluginSpec, PolicyRunner, ProcessRunner, ThreadRunner
from autoscaler.engine.report import RoundReport
from autoscaler.metrics_contract import DEFAULT_QUERY_TEMPLATE
from autoscaler.observability.decision_log import DecisionLog
from autoscaler.observability.engine_metrics import engine_metrics
from autoscaler.policies.contract import Policy, Snapshot, reporting_of
from autoscaler.policies.registry import (
    DEFAULT_POLICY,
    PolicyError,
    build,
    find,
    installed,
    load_entry,
)
from autoscaler.policies.speedup import objective_value

log = logging.getLogger(__name__)


def add_engine_commands(commands: Any) -> None:
    policies = commands.add_parser(
        "policies", help="list the installed policies and their config schema"
    )
    policies.add_argument("-o", "--output", choices=["text", "json"], default="text")
    policies.set_defaults(command=list_policies)

    decide = commands.add_parser(
        "decide",
        help="run a policy once on a snapshot file and print its decisions: its wishes, before"
        " the engine's settle steps (holds, clamping, stabilisation, rate limits, the starvation"
        " bound), which it does not apply",
    )
    decide.add_argument("--snapshot", type=Path, required=True, help="snapshot JSON (see docs)")
    decide.add_argument("--policy", default=DEFAULT_POLICY, help="policy name or .py file")
    decide.add_argument("--config", type=Path, help="the policy's config (YAML or JSON)")
    decide.set_defaults(command=decide_once)

    engine = commands.add_parser(
        "engine", help="size every elastic job, every interval (leader-elected)"
    )
    engine.add_argument("--config", type=Path, help="engine config YAML (defaults when absent)")
    engine.add_argument(
        "--check",
        action="store_true",
        help="only validate the config and build its policy, then exit (no cluster needed)",
    )
    add_service_arguments(engine, lease_name="elastic-autoscaler-engine")
    engine.set_defaults(command=run_engine)


def list_policies(args: argparse.Namespace) -> int:
    listing = []
    for name, entry in sorted(installed().items()):
        try:
            plugin = load_entry(entry)
            listing.append(
                {
                    "name": name,
                    "summary": plugin.summary,
                    "config_schema": plugin.config_model.model_json_schema(),
                }
            )
        except PolicyError as error:
            listing.append({"name": name, "error": str(error)})
    if args.output == "json":
        print(json.dumps(listing, indent=2))
        return 0
    for item in listing:
        print(f"{item['name']}: {item.get('summary') or 'BROKEN: ' + item['error']}")
        for key, field in (item.get("config_schema") or {}).get("properties", {}).items():
            print(f"    {key}: {field.get('description') or field.get('type') or ''}")
    return 0


def decide_once(args: argparse.Namespace) -> int:
    snapshot = Snapshot.model_validate_json(args.snapshot.read_text())
    plugin = find(args.policy)
    policy = build(plugin, _read_mapping(args.config) if args.config else {})
    started = time.perf_counter()
    decisions = policy.decide(snapshot, now=datetime.now(UTC))
    seconds = time.perf_counter() - started
    reporting = reporting_of(policy)
    replicas = {decision.key: decision.replicas for decision in decisions}
    print(
        json.dumps(
            {
                "policy": plugin.name,
                "objective": objective_value(
                    snapshot, replicas, objective=reporting.objective, model=reporting.model
                ),
                "solve_seconds": seconds,
                "settled": False,  # the policy's wishes: the engine's settle steps are not run
                "decisions": [
                    {
                        "namespace": d.namespace,
                        "name": d.name,
                        "replicas": d.replicas,
                        "reason": d.reason,
                        "message": d.message,
                    }
                    for d in decisions
                ],
            },
            indent=2,
        )
    )
    return 0


def _read_mapping(path: Path) -> dict[str, Any]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise PolicyError(f"{path}: the config must be a mapping")
    return data


def policy_from(config: EngineConfig) -> tuple[str, Policy]:
    """The configured policy and its plug-in's name."""
    plugin = find(config.policy.name)
    return plugin.name, build(plugin, config.policy.config)


def runner_from(config: EngineConfig, *, name: str, policy: Policy) -> PolicyRunner:
    """How the engine calls its policy: in a worker process unless the config says thread.

    A process by default because a plug-in is foreign code: a hung call in a thread pins that
    thread for good (no decision ever again) and a leak in it grows the engine until its pod is
    OOM-killed; a worker is killed and replaced instead. Its cost is a copy of the snapshot
    each way (`make bench-scale` measures it at 5,000 jobs)."""
    selection = config.policy
    if selection.isolation == "thread":
        return ThreadRunner(policy, name=name, timeout=selection.timeout_seconds)
    return ProcessRunner(
        PluginSpec.of(selection.name, selection.config),
        name=name,
        timeout=selection.timeout_seconds,
        max_memory_mb=selection.max_memory_mb,
        start_timeout=selection.start_timeout_seconds,
    )


def run_engine(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    name, policy = policy_from(config)
    if args.check:
        print(f"{args.config or 'the default config'} is valid: policy {name}")
        return 0
    configure_logging()
    kube = Kube(api_client(kubeconfig=args.kubeconfig))
    metrics = engine_metrics()
    reporting = reporting_of(policy)
    source = config.prometheus
    cluster = KubeCluster(kube, namespaces=config.namespaces)
    throughput = PrometheusThroughput(
        url=source.url,
        template=source.query or DEFAULT_QUERY_TEMPLATE,
        window=source.window,
        timeout=source.timeout_seconds,
        bearer_token_file=source.bearer_token_file,
        verify_tls=source.verify_tls,
    )
    engine = Engine(
        cluster=cluster,
        throughput=throughput,
        policy=policy,
        policy_name=name,
        config=config,
        objective=reporting.objective,
        model=reporting.model,
        metrics=metrics,
        decision_log=DecisionLog(config.decision_log) if config.decision_log else None,
        runner=runner_from(config, name=name, policy=policy),
        goodput=throughput,
    )

    health = RoundHealth(interval=config.interval_seconds)

    def work(stop: threading.Event) -> None:
        _schedule(engine, interval=config.interval_seconds, stop=stop, health=health)

    try:
        return run_service(args, kube=kube, metrics=metrics, work=work, ready=health.ok)
    finally:
        engine.close()
        cluster.close()
        throughput.close()
        kube.close()


class RoundHealth:
    """/healthz of the leader: unhealthy once no round has completed for three intervals (and at
    least a minute), e.g. the API server has been unreachable that long or a round hangs."""

    def __init__(self, *, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock, self.allowed = clock, max(3 * interval, 60.0)
        self.last = clock()

    def beat(self) -> None:
        self.last = self.clock()

    def ok(self) -> bool:
        return self.clock() - self.last <= self.allowed


@contextmanager
def round_collections() -> Iterator[None]:
    """No automatic collection during a round; after it, collect the garbage of what was
    allocated since the last round (all else is frozen, so only that is traversed), then freeze
    what survived. At 5,000 jobs the process holds millions of long-lived objects (the
    informers' caches, the jobs' states), and each of CPython's full collections traversed them
    all, nearly once a round, and a round allocates enough to start several younger ones
    (`make bench-scale` times the rounds). Frozen objects are still freed by reference counting
    when dropped; only a reference cycle among them would outlive its last use, and what a round
    keeps (the API server's JSON, pydantic models) forms none."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()
        gc.freeze()


@dataclass(frozen=True)
class RoundTally:
    """What outlives a round: its log line's figures."""

    jobs: int
    written: int
    solve_seconds: float
    fallback: str

    @classmethod
    def of(cls, report: RoundReport) -> "RoundTally":
        written = sum(outcome.written for outcome in report.outcomes)
        return cls(len(report.outcomes), written, report.solve_seconds, report.fallback)

    def __str__(self) -> str:
        fallback = f", fallback {self.fallback}" if self.fallback else ""
        return (
            f"{self.jobs} jobs, {self.written} written, policy {self.solve_seconds:.3f} s{fallback}"
        )


def run_round(engine: Engine, *, now: datetime) -> RoundTally:
    """One round as `autoscaler engine` runs it (see `round_collections`). Its report is dropped
    before the collection after the round, which would otherwise traverse every job's snapshot
    and outcome for nothing (measured by `make bench-scale`)."""
    with round_collections():
        tally = RoundTally.of(engine.run_once(now=now))
    return tally


def _schedule(
    engine: Engine, *, interval: float, stop: threading.Event, health: RoundHealth
) -> None:
    """A round now and every interval after; a round never overlaps the next; stop waits for it."""
    scheduler = BackgroundScheduler(timezone=UTC)

    def round_() -> None:
        try:
            tally = run_round(engine, now=datetime.now(UTC))
            health.beat()
            log.info("round: %s", tally)
        except Exception:  # one failed round (API down) must not end the engine
            log.exception("decision round failed; retrying next interval")

    scheduler.add_job(
        round_,
        "interval",
        seconds=interval,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
    )
    scheduler.start()
    log.info("deciding every %.1f s with policy %s", interval, engine.policy_name)
    try:
        stopped_within(stop, math.inf)
    finally:  # no round may outlive the engine's close
        scheduler.shutdown(wait=True)
