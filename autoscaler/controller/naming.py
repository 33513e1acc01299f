"""Names, labels, selectors and owner references of the objects a job owns (upstream's exactly)."""

from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api.models import PyTorchJob

JSON = dict[str, Any]


def replica_name(*, job_name: str, replica_type: str, index: int) -> str:
    """`<job>-<type>-<index>`, the pod's and its headless service's name (`GenGeneralName`)."""
    return f"{job_name.replace('/', '-')}-{replica_type.lower()}-{index}"


def job_labels(job_name: str) -> dict[str, str]:
    return {c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME, c.LABEL_JOB_NAME: job_name.replace("/", "-")}


def replica_type_labels(*, job_name: str, replica_type: str) -> dict[str, str]:
    return {**job_labels(job_name), c.LABEL_REPLICA_TYPE: replica_type.lower()}


def replica_labels(*, job_name: str, replica_type: str, index: int) -> dict[str, str]:
    labels = replica_type_labels(job_name=job_name, replica_type=replica_type)
    return {**labels, c.LABEL_REPLICA_INDEX: str(index)}


def selector(labels: dict[str, str]) -> str:
    """`metav1.FormatLabelSelector` of matchLabels: `k=v` sorted by key, joined by commas."""
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def replica_selector(*, job_name: str, replica_type: str) -> str:
    return selector(replica_type_labels(job_name=job_name, replica_type=replica_type))


def owner_reference(job: PyTorchJob) -> JSON:
    return controller_reference(name=job.name, uid=job.metadata.uid or "")


def controller_reference(*, name: str, uid: str) -> JSON:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_master_role(job: PyTorchJob, *, replica_type: str, index: int) -> bool:
    """Master-0, or Worker-0 when there is no Master, plays the master role."""
    role_type = c.MASTER if job.master is not None else c.WORKER
    return replica_type == role_type and index == 0
