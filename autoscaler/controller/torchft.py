"""torchft mode (pure): what a job that opts in owns besides its workers, and their environment.

A job with `elastic-autoscaler.io/fault-tolerance: torchft` gets a lighthouse Pod (the worker
image's `torchft_lighthouse`, `--min_replicas` = the elastic minimum) and a Service of the same
name, owned by the job. Its workers carry no torchrun rendezvous: each is one torchft replica
group, numbered by its index, so a replaced pod rejoins as the same group. torchft 0.2.0 does
not survive a lighthouse restart (quorum ids start again and collide with the old store keys),
so every worker is stamped with its lighthouse's uid and a worker of a lost lighthouse is
restarted: it heals from the job's checkpoint.
"""

from autoscaler import fault_tolerance as ft
from autoscaler.api import coordinates as c
from autoscaler.api import operator_annotations as oa
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller.env import procs_per_node, pytorch_port
from autoscaler.controller.naming import job_labels, owner_reference
from autoscaler.controller.side_pods import side_pod

LIGHTHOUSE_TYPE = "lighthouse"  # its replica-type label: no Worker or Master slot counts it
STATUS_KEY = "Lighthouse"  # its counts in status.replicaStatuses
# Not a job annotation (not in autoscaler.api.operator_annotations): the operator stamps it on the
# worker pods it creates and reads it back from them only.
ANNOTATION_LIGHTHOUSE_UID = "elastic-autoscaler.io/torchft-lighthouse-uid"
# It holds no model: torch's import and torchft's Rust server (about 250 MB resident, measured).
LIGHTHOUSE_RESOURCES = {"requests": {"cpu": "50m", "memory": "256Mi"}}


def requested(job: PyTorchJob) -> bool:
    return ft.ANNOTATION in _annotations(job)


def _annotations(job: PyTorchJob) -> dict[str, str]:
    return job.metadata.annotations or {}


def problem(job: PyTorchJob) -> str | None:
    """Why the job's torchft settings cannot be run, if they cannot: the mode's annotation
    first, then the job's spec, then the lighthouse timeouts."""
    if not requested(job):
        return None
    _, invalid = oa.read_operator_annotations(_annotations(job))
    refused = {i.key: i.message for i in invalid if i.mode is oa.FAULT_TOLERANCE}
    checks = [
        *((True, message) for key, message in refused.items() if key == ft.ANNOTATION),
        (
            job.spec.elastic_policy is None,
            f"{ft.ANNOTATION} needs spec.elasticPolicy: torchft resizes elastic jobs only",
        ),
        (
            job.master is not None,
            f"{ft.ANNOTATION} needs a job without a Master: every Worker is a replica group",
        ),
        (
            procs_per_node(job) > 1,
            f"{ft.ANNOTATION} runs one process per pod: nprocPerNode must be 1 or unset",
        ),
        *((True, message) for key, message in refused.items() if key != ft.ANNOTATION),
    ]
    return next((message for failed, message in checks if failed), None)


def lighthouse_args(job: PyTorchJob) -> list[str]:
    assert job.spec.elastic_policy is not None
    found, _ = oa.read_operator_annotations(_annotations(job))
    return [
        ft.LIGHTHOUSE_COMMAND,
        f"--bind=[::]:{ft.LIGHTHOUSE_PORT}",
        f"--min_replicas={job.spec.elastic_policy.min_replicas}",
        f"--heartbeat_timeout_ms={found.heartbeat_timeout_ms}",
        f"--join_timeout_ms={found.join_timeout_ms}",
        f"--quorum_tick_ms={found.quorum_tick_ms}",
    ]


def lighthouse_labels(job: PyTorchJob) -> dict[str, str]:
    return {**job_labels(job.name), c.LABEL_REPLICA_TYPE: LIGHTHOUSE_TYPE}


def desired_lighthouse_pod(job: PyTorchJob) -> JSON:
    return side_pod(
        job,
        name=ft.lighthouse_name(job.name),
        role="lighthouse",
        labels=lighthouse_labels(job),
        command=lighthouse_args(job),
        port=ft.LIGHTHOUSE_PORT,
        resources=LIGHTHOUSE_RESOURCES,
    )


def desired_lighthouse_service(job: PyTorchJob) -> JSON:
    port = {"name": "lighthouse", "port": ft.LIGHTHOUSE_PORT, "targetPort": ft.LIGHTHOUSE_PORT}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": ft.lighthouse_name(job.name),
            "namespace": job.metadata.namespace,
            "labels": lighthouse_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {"selector": lighthouse_labels(job), "ports": [port]},
    }


def worker_env(job: PyTorchJob, *, index: int) -> list[JSON]:
    """What torchft's Manager and `autoscaler.training.fault_tolerant` read in a worker."""
    assert job.spec.elastic_policy is not None
    assert job.worker is not None
    pod_ip = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    return [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": ft.ENV_LIGHTHOUSE, "value": ft.lighthouse_url(job.name)},
        {"name": ft.ENV_REPLICA_GROUP, "value": str(index)},
        {"name": ft.ENV_MIN_REPLICAS, "value": str(job.spec.elastic_policy.min_replicas)},
        {"name": ft.ENV_POD_IP, **pod_ip},
        {"name": "MASTER_ADDR", **pod_ip},  # the group's own store, reachable from peers
        {"name": "MASTER_PORT", "value": str(pytorch_port(job.worker))},
        {"name": "RANK", "value": "0"},
        {"name": "WORLD_SIZE", "value": "1"},
        {"name": ft.ENV_TIMEOUT, "value": str(ft.DEFAULT_TIMEOUT_SECONDS)},
        {"name": "JOB_ID", "value": f"{job.metadata.namespace}/{job.name}"},
    ]


def lighthouse_uid(pod: JSON) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_LIGHTHOUSE_UID)


def is_lighthouse(obj: JSON) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_REPLICA_TYPE) == LIGHTHOUSE_TYPE
