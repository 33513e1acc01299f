"""Kubernetes JSON read into the engine's typed view: a PyTorchJob as `ManagedJob`, an HPA as
`HpaStatus`, a pod's resource requests. Pure functions: the engine itself never sees raw JSON."""

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from autoscaler import fault_tolerance, torchrun
from autoscaler.api import coordinates as c
from autoscaler.api.annotations import Bounds, Report, read_annotations
from autoscaler.api.defaults import default_bounds
from autoscaler.api.ownership import owner
from autoscaler.api.quantity import parse_resources
from autoscaler.api.timestamps import parse_timestamp
from autoscaler.engine.ports import HpaCondition, HpaStatus, JobKey, ManagedJob

JSON = Mapping[str, Any]
log = logging.getLogger(__name__)
FINISHED = ("Succeeded", "Failed")


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
    # Every engine annotation is read through its declaration; the job's throughput query is
    # judged later by the engine (`autoscaler.engine.throughput_query`), with its settings.
    found, problems = read_annotations(annotations, Bounds(low=low, high=high))
    for problem in problems:
        if problem.report is Report.LOG:
            log.warning("%s", problem.message)
    queue = (metadata.get("labels") or {}).get(c.LABEL_KUEUE_QUEUE_NAME, "")
    status = obj.get("status") or {}
    # torchft mode: a resize pauses the survivors about a second and spends no torchrun restart.
    # The declaration reads any other value as invalid, hence not torchft: this equality is its
    # reading, without building the operator's model for every job every round.
    torchft = annotations.get(fault_tolerance.ANNOTATION) == fault_tolerance.TORCHFT
    return ManagedJob(
        namespace=metadata.get("namespace", ""),
        name=metadata["name"],
        uid=metadata.get("uid", ""),
        resource_version=metadata.get("resourceVersion", ""),
        min_replicas=low,
        max_replicas=high,
        replicas=replicas,
        active=int(((status.get("replicaStatuses") or {}).get(c.WORKER) or {}).get("active") or 0),
        owner=owner(policy, annotations=annotations, queue=queue, opted_out=found.opt_out),
        queue=queue,
        created=parse_timestamp(metadata["creationTimestamp"]),
        resources_per_replica=pod_requests(worker.get("template") or {}),
        weight=found.weight,
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
        state=found.state,
        total_samples=found.total_samples,
        allowed_replicas=found.allowed_replicas,
        throughput_query=found.throughput_query,
        throughput_profile=found.throughput_profile,
        problems=tuple(p.message for p in problems if p.report is Report.WARNING),
        preemptible=found.preemptible,
        suspended=bool((spec.get("runPolicy") or {}).get("suspend")),
        held_since=found.held_since,
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


def worker_job(pod: JSON) -> JobKey | None:
    """The PyTorchJob whose worker `pod` is (the operator's labels), None for any other pod."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(c.LABEL_REPLICA_TYPE) != c.WORKER.lower():
        return None
    return (metadata.get("namespace", ""), labels.get(c.LABEL_JOB_NAME, ""))


def worker_health(
    pods: Iterable[JSON], *, worker_of: Callable[[JSON], JobKey | None] = worker_job
) -> dict[JobKey, tuple[int, int]]:
    """Per job, its worker pods placed on a node but not Ready (starting, restarting, leaving, or
    on a node that stopped reporting: the node lifecycle controller marks them not Ready) and
    their containers' restarts summed. Finished pods and pods not placed yet count for nothing
    (a pod no node can take is a capacity matter, not a recovery). `worker_of` tells whose
    worker a pod is (a PyTorchJob's, by default)."""
    health: dict[JobKey, tuple[int, int]] = {}
    for pod in pods:
        metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
        if not (pod.get("spec") or {}).get("nodeName"):
            continue
        key = worker_of(pod)
        if key is None:
            continue
        if status.get("phase") in FINISHED:
            continue
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
