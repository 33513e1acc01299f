"""`autoscaler explain NAMESPACE/NAME`: why the job has the worker count it has."""

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from autoscaler.api import coordinates as c
from autoscaler.clients.jobs import hpa_status, managed_job, object_name
from autoscaler.clients.kube import HPAS, JOBS, PODS, Kube, NotFoundError, api_client
from autoscaler.controller.naming import replica_selector
from autoscaler.controller.planned_placement import worker_layout
from autoscaler.engine.config import load_config
from autoscaler.engine.explain import explain
from autoscaler.policies.contract import reporting_of
from autoscaler.policies.registry import build, find
from autoscaler.policies.throughput_model import ThroughputModel


class UnknownJobError(LookupError):
    pass


def add_explain_command(commands: Any) -> None:
    sub = commands.add_parser(
        "explain", help="why a job has its worker count: owner, data, decisions"
    )
    sub.add_argument("job", metavar="NAMESPACE/NAME")
    sub.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="default: $KUBECONFIG, else in-cluster",
    )
    sub.add_argument("--context", help="the kubeconfig context (default: its current one)")
    sub.add_argument("--config", type=Path, help="the engine's config (for its throughput model)")
    sub.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    sub.set_defaults(command=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    namespace, _, name = args.job.rpartition("/")
    if not namespace or not name:
        raise UnknownJobError(f"expected NAMESPACE/NAME, got {args.job!r}")
    kube = Kube(api_client(kubeconfig=args.kubeconfig, context=args.context))
    try:
        obj = kube.get(JOBS, namespace, name)
    except NotFoundError:
        raise UnknownJobError(f"pytorchjob {namespace}/{name} not found") from None
    try:
        hpa, workers = _hpa(kube, namespace, name), workers_of(kube, namespace, name)
    finally:
        kube.close()
    report = explain(
        managed_job(obj),
        name=object_name(obj),
        hpa=hpa_status(hpa) if hpa is not None else None,
        now=datetime.now(UTC),
        model=_model(args.config),
        workers=workers,
    )
    print(formatted(report, args.output))
    return 0


def _hpa(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube.get(HPAS, namespace, name)
    except NotFoundError:
        return None
    return found


def workers_of(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """Where the job's workers are; None when the caller may not list the namespace's pods."""
    if not kube.may("list", PODS, namespace=namespace):
        return None
    selector = replica_selector(job_name=name, replica_type=c.WORKER)
    return worker_layout(kube.list(PODS, namespace=namespace, selector=selector)["items"])


def formatted(report: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(report, indent=2)
    if output == "yaml":  # through JSON first: safe_dump refuses numpy floats, JSON takes them
        return yaml.safe_dump(json.loads(json.dumps(report)), sort_keys=False).rstrip("\n")
    return render(report)


def _model(path: Path | None) -> ThroughputModel:
    """The throughput model of the engine's policy, when its config says one."""
    config = load_config(path)
    plugin = find(config.policy.name)
    return reporting_of(build(plugin, config.policy.config)).model


def render(report: dict[str, Any]) -> str:
    lines = [f"Job:       {report['job']}", f"Owner:     {report['owner']}"]
    if not report["elastic"]:
        return "\n".join(lines)
    lines[-1] += f" ({report['owner_reason']}: {report['owner_explained']})"
    if report["queue"]:
        lines.append(f"Queue:     {report['queue']} (Kueue LocalQueue)")
    return "\n".join([*lines, *_hpa_lines(report), *_job_lines(report), *_decision_lines(report)])


def _hpa_lines(report: dict[str, Any]) -> list[str]:
    hpa = report["hpa"]
    if not hpa:
        return []
    return [
        f"HPA:       {hpa['name']}: desired {hpa['desired_replicas']}",
        *(f"           {condition}" for condition in hpa["conditions"]),
    ]


def _job_lines(report: dict[str, Any]) -> list[str]:
    replicas, bounds, restarts = report["replicas"], report["bounds"], report["restarts"]
    budget = _or(restarts["remaining"], "unlimited")
    return [
        f"Workers:   {replicas['spec']} wanted, {replicas['active']} active,"
        f" bounds [{bounds['min']}, {bounds['max']}]",
        *_placement_lines(report["workers"]),
        f"Per pod:   {_resources(report['resources_per_replica'])}; weight {report['weight']:g}",
        f"Rescales:  {restarts['rescales']} (restart budget left: {budget}),"
        f" last {_or(report['last_rescale'], 'never')}",
        *_work_lines(report["work"]),
        *_queueing_lines(report["queueing"]),
        *_goodput_lines(report["goodput"]),
        *_recovery_lines(report["recovery"]),
        "Throughput (samples/s by workers):",
        *(
            f"  {row['replicas']:>4}  {_or(row['samples_per_second'], '-', '{:.4g}'):>10}"
            f"  {row['source']}"
            for row in report["curve"]
        ),
    ]


def _placement_lines(workers: dict[str, Any] | None) -> list[str]:
    """Where the job's live workers are: on nodes, held until they pack, or not bound yet."""
    if workers is None:
        return []
    parts = [", ".join(f"{node} {count}" for node, count in workers["nodes"].items())]
    if workers["waiting_for_room"]:
        parts.append(
            f"{workers['waiting_for_room']} waiting for room to pack (the planned placement)"
        )
    if workers["unbound"]:
        parts.append(f"{workers['unbound']} not bound yet")
    return [f"Placement: {'; '.join(part for part in parts if part) or 'no worker pods'}"]


def _goodput_lines(goodput: dict[str, Any] | None) -> list[str]:
    """Only for a job sized by goodput: its noise scale, the batch priced at its count and the
    batch it reports running there."""
    if goodput is None:
        return []
    running = goodput.get("running")
    return [
        f"Goodput:   noise scale {goodput['noise_scale']:.4g} at base batch"
        f" {goodput['base_batch']}; at {goodput['replicas']} workers batch"
        f" {goodput['global_batch']} ({goodput['local_batch']} per rank x"
        f" {goodput['accum_steps'] + 1} micro-steps), efficiency {goodput['efficiency']:.3f},"
        f" {goodput['goodput']:.4g} samples at base batch/s",
        *(
            [
                f"           the job runs batch {running['global_batch']}"
                f" ({running['local_batch']} per rank x {running['accum_steps'] + 1}"
                f" micro-steps): {running['share_of_goodput']:.1%} of that goodput"
            ]
            if running
            else []
        ),
    ]


def _queueing_lines(queueing: dict[str, Any]) -> list[str]:
    """Only for a job that may be held back or is suspended."""
    by = queueing["suspended_by"]
    if not queueing["preemptible"] and by is None:
        return []
    now = (
        f"held back by the engine since {queueing['held_since']}"
        if by == "engine"
        else ("suspended by its user (never resumed by the engine)" if by == "user" else "running")
    )
    may = "preemptible" if queueing["preemptible"] else "not preemptible"
    forced = queueing["forced_resume"]
    bound = f", resumed by the starvation bound at {forced}" if forced else ""
    return [f"Queueing:  {may}; {now}; held back {queueing['suspensions']} times{bound}"]


def _recovery_lines(recovery: dict[str, Any]) -> list[str]:
    """Only for a job that was seen recovering."""
    since = recovery["disturbed_at"]
    if since is None:
        return []
    why = recovery["disturbance"]
    now = f"recovering: {why}" if why else "whole again"
    return [f"Recovery:  {now} (last seen recovering at {since})"]


def _work_lines(work: dict[str, Any]) -> list[str]:
    total = work["total_samples"]
    declared = "no total declared" if total is None else f"of {total:.4g} declared"
    allowed = work["allowed_replicas"]
    return [
        f"Work:      {work['samples_done']:.4g} samples done ({declared}),"
        f" {work['attained_worker_seconds']:.0f} worker-seconds attained",
        *([f"Allowed:   {', '.join(map(str, allowed))} workers"] if allowed else []),
        *(f"Ignored:   {problem}" for problem in work["ignored_annotations"]),
    ]


def _decision_lines(report: dict[str, Any]) -> list[str]:
    lines = ["Decisions (newest first):"]
    for record in report["decisions"]:
        written = "written" if record["written"] else "not written"
        objective = _or(record["objective"], "-", "{:.4g}")
        lines.append(
            f"  {record['time']} {record['policy']}: proposed {record['proposed']}"
            f" -> {record['replicas']} ({record['reason']}, {written}, objective {objective})"
        )
        lines += [
            f"    {step['name']:<10} {step['replicas']:>4}  {step['reason']}: {step['message']}"
            for step in record["steps"]
        ]
    return lines if report["decisions"] else [*lines, "  none yet"]


def _resources(resources: dict[str, float]) -> str:
    return ", ".join(f"{name}={amount:g}" for name, amount in sorted(resources.items())) or "none"


def _or(value: Any, default: str, pattern: str = "{}") -> str:
    return default if value is None else pattern.format(value)
