"""Kubernetes JSON read into the engine's typed view: a PyTorchJob as `ManagedJob`, an HPA as
`HpaStatus`, a pod's resource requests. Pure functions: the engine itself never sees raw JSON."""

import logging
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from autoscaler import fault_tolerance, torchrun
from autoscaler.api import coordinates as c
from autoscaler.api.defaults import default_bounds
from autoscaler.api.quantity import parse_resources
from autoscaler.api.timestamps import parse_timestamp
from autoscaler.engine.ports import HpaCondition, HpaStatus, JobKey, ManagedJob, Owner

JSON = Mapping[str, Any]
log = logging.getLogger(__name__)
FINISHED = ("Succeeded", "Failed")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def managed_job(obj: JSON) -> ManagedJob | None:
    """The elastic job's view, or None for jobs the engine has nothing to do with."""
    spec, metadata = obj.get("spec") or {}, obj.get("metadata") or {}
    policy = spec.get("elasticPolicy")
    worker = (spec.get("pytorchReplicaSpecs") or {}).get(c.WORKER)
    if policy is None or worker is None:
        return None
    replicas = int(worker.get("replicas") or 1)
    low, high = _bounds(policy, replicas=replicas)
    annotations = metadata.get("annotations") or {}
    queue = (metadata.get("labels") or {}).get(c.LABEL_KUEUE_QUEUE_NAME, "")
    status = obj.get("status") or {}
    total, total_problem = total_samples(annotations.get(c.ANNOTATION_TOTAL_SAMPLES))
    allowed, allowed_problem = allowed_replicas(
        annotations.get(c.ANNOTATION_ALLOWED_REPLICAS), low=low, high=high
    )
    # The engine judges the job's own query (`autoscaler.engine.throughput_query`): with its
    # settings, and holding the job when it refuses it.
    query = annotations.get(c.ANNOTATION_THROUGHPUT_QUERY)
    # torchft mode: a resize pauses the survivors about a second and spends no torchrun restart.
    torchft = annotations.get(fault_tolerance.ANNOTATION) == fault_tolerance.TORCHFT
    may_hold, preemptible_problem = preemptible(annotations.get(c.ANNOTATION_PREEMPTIBLE))
    return ManagedJob(
        namespace=metadata.get("namespace", ""),
        name=metadata["name"],
        uid=metadata.get("uid", ""),
        resource_version=metadata.get("resourceVersion", ""),
        min_replicas=low,
        max_replicas=high,
        replicas=replicas,
        active=int(((status.get("replicaStatuses") or {}).get(c.WORKER) or {}).get("active") or 0),
        owner=owner(policy, annotations=annotations, queue=queue),
        queue=queue,
        created=parse_timestamp(metadata["creationTimestamp"]),
        resources_per_replica=pod_requests(worker.get("template") or {}),
        weight=_weight(annotations),
        max_restarts=None
        if torchft
        else int(policy.get("maxRestarts") or torchrun.DEFAULT_MAX_RESTARTS),
        restart_seconds=fault_tolerance.RESIZE_PAUSE_SECONDS if torchft else None,
        finished=any(
            cond.get("type") in FINISHED and cond.get("status") == "True"
            for cond in status.get("conditions") or []
        ),
        gang_waiting=any(
            cond.get("type") == c.CONDITION_GANG_SCHEDULED and cond.get("status") == "False"
            for cond in status.get("conditions") or []
        ),
        quota_waiting=any(
            cond.get("type") == c.CONDITION_QUOTA_ADMITTED and cond.get("status") == "False"
            for cond in status.get("conditions") or []
        ),
        state=annotations.get(c.ANNOTATION_STATE, ""),
        total_samples=total,
        allowed_replicas=allowed,
        throughput_query=query,
        problems=tuple(
            problem for problem in (total_problem, allowed_problem, preemptible_problem) if problem
        ),
        preemptible=may_hold,
        suspended=bool((spec.get("runPolicy") or {}).get("suspend")),
        held_since=_held_since(annotations.get(c.ANNOTATION_HELD_SINCE)),
    )


def _bounds(policy: JSON, *, replicas: int) -> tuple[int, int]:
    """The bounds as the operator defaults them (see `default_bounds`)."""
    low, high = default_bounds(
        policy.get("minReplicas"), policy.get("maxReplicas"), replicas=replicas
    )
    return int(low), int(high)


def object_name(obj: JSON) -> str:
    """`namespace/name` of any object, as kubectl names it."""
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def hpa_status(hpa: JSON) -> HpaStatus:
    """What `explain` shows of a HorizontalPodAutoscaler: its wish and its conditions."""
    status = hpa.get("status") or {}
    return HpaStatus(
        name=hpa["metadata"]["name"],
        desired_replicas=status.get("desiredReplicas"),
        conditions=tuple(
            HpaCondition(
                type=cond.get("type", ""),
                status=cond.get("status", ""),
                reason=cond.get("reason", ""),
                message=cond.get("message", ""),
            )
            for cond in status.get("conditions") or []
        ),
    )


def owner(policy: JSON, *, annotations: Mapping[str, str], queue: str) -> Owner:
    """One writer per job: Kueue when it queues the job (its admission fixes the size, even
    against an HPA) unless the job opted into Kueue's workload slices (the operator's Kueue
    integration turns its resizes into slices Kueue admits), its HPA when metrics are declared,
    nobody when it opted out."""
    if queue and annotations.get(c.ANNOTATION_KUEUE_ELASTIC) != "true":
        return Owner.KUEUE
    if policy.get("metrics"):
        return Owner.HPA
    if annotations.get(c.ANNOTATION_OPT_OUT, "").lower() == "true":
        return Owner.OPTED_OUT
    return Owner.ENGINE


def pod_requests(template: JSON) -> dict[str, float]:
    """Requests of one pod (limits stand in for missing requests, as the API server defaults)."""
    pod = template.get("spec") or {}
    totals: dict[str, float] = {}
    for container in pod.get("containers") or []:
        for name, amount in _container_requests(container).items():
            totals[name] = totals.get(name, 0.0) + amount
    for container in pod.get("initContainers") or []:  # init containers run one at a time
        for name, amount in _container_requests(container).items():
            totals[name] = max(totals.get(name, 0.0), amount)
    return totals


def _container_requests(container: JSON) -> dict[str, float]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return parse_resources(merged)


def _weight(annotations: Mapping[str, str]) -> float:
    text = annotations.get(c.ANNOTATION_WEIGHT)
    try:
        weight = float(text) if text is not None else 1.0
    except ValueError:
        log.warning("ignoring weight annotation %r: not a number", text)
        return 1.0
    return weight if weight > 0 else 1.0


def total_samples(text: str | None) -> tuple[float | None, str]:
    """The declared total work, or None and why the annotation is ignored."""
    if text is None:
        return None, ""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        return None, f"{c.ANNOTATION_TOTAL_SAMPLES} {text!r} is not a positive number: ignored"
    return value, ""


def preemptible(text: str | None) -> tuple[bool, str]:
    """Whether the job lets the engine hold it back, and why the annotation is ignored (then
    it is not: never by default)."""
    if text is None or text == "false":
        return False, ""
    if text == "true":
        return True, ""
    return False, f'{c.ANNOTATION_PREEMPTIBLE} {text!r} is neither "true" nor "false": ignored'


def _held_since(text: str | None) -> datetime | None:
    """When the engine suspended the job (its marker); an unreadable marker is the engine's
    anyway (only the engine writes it), dated at the epoch so the starvation bound is due."""
    if text is None:
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        log.warning("unreadable %s %r: held since the epoch", c.ANNOTATION_HELD_SINCE, text)
        return EPOCH


def allowed_replicas(
    text: str | None, *, low: int, high: int
) -> tuple[tuple[int, ...] | None, str]:
    """The counts the job may run at (within its bounds), or None and why the annotation is
    ignored: every count must be a whole number in [low, high]."""
    if text is None:
        return None, ""
    name = c.ANNOTATION_ALLOWED_REPLICAS
    if text.strip() == "powers-of-two":
        counts = [2**k for k in range(high.bit_length()) if low <= 2**k <= high]
        if not counts:
            return None, f"{name}: no power of two lies in [{low}, {high}]: ignored"
        return tuple(counts), ""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        what = "neither a comma-separated list of counts nor powers-of-two"
        return None, f"{name} {text!r} is {what}: ignored"
    counts = sorted({int(part) for part in parts})
    outside = [n for n in counts if not low <= n <= high]
    if outside:
        return None, f"{name} {text!r}: {outside} outside the job's [{low}, {high}]: ignored"
    return tuple(counts), ""


def worker_health(pods: Iterable[JSON]) -> dict[JobKey, tuple[int, int]]:
    """Per job, its worker pods placed on a node but not Ready (starting, restarting, leaving, or
    on a node that stopped reporting: the node lifecycle controller marks them not Ready) and
    their containers' restarts summed. Finished pods and pods not placed yet count for nothing
    (a pod no node can take is a capacity matter, not a recovery)."""
    health: dict[JobKey, tuple[int, int]] = {}
    for pod in pods:
        metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
        labels = metadata.get("labels") or {}
        placed = bool((pod.get("spec") or {}).get("nodeName"))
        if labels.get(c.LABEL_REPLICA_TYPE) != c.WORKER.lower() or not placed:
            continue
        if status.get("phase") in FINISHED:
            continue
        key = (metadata.get("namespace", ""), labels.get(c.LABEL_JOB_NAME, ""))
        ready = any(
            cond.get("type") == "Ready" and cond.get("status") == "True"
            for cond in status.get("conditions") or []
        )
        unready = int(bool(metadata.get("deletionTimestamp")) or not ready)
        restarts = sum(
            int(s.get("restartCount") or 0) for s in status.get("containerStatuses") or []
        )
        before = health.get(key, (0, 0))
        health[key] = (before[0] + unready, before[1] + restarts)
    return health
