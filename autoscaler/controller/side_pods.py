"""Pods the operator runs beside a job's workers (torchft's lighthouse, the rendezvous store): one
container of their own on the worker's image, placed where the workers can run, owned by the job
and replaced rather than restarted."""

from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller.env import pytorch_container
from autoscaler.controller.naming import owner_reference

# Copied from the worker template, so the side pod can run where the workers can.
POD_FIELDS = (
    "imagePullSecrets",
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "securityContext",
    "serviceAccountName",
    "schedulerName",
)
# Their state is in memory and lost on any end; as a container's PID 1 neither server handles
# SIGTERM, so the default 30 s grace only delays a finished job's cleanup (test_torchft).
GRACE_SECONDS = 1


def side_pod(
    job: PyTorchJob,
    *,
    name: str,
    role: str,
    labels: dict[str, str],
    command: list[str],
    port: int,
    resources: JSON,
    affinity: JSON | None = None,
) -> JSON:
    """The pod `name` running `command` on the worker's image, serving `port` (its container and
    port named `role`); `affinity`, when
    given, replaces the template's."""
    worker = job.worker
    assert worker is not None
    template = worker.template or {}
    spec = template.get("spec") or {}
    worker_container = pytorch_container(template)
    container: dict[str, object] = {
        "name": role,
        "image": worker_container.get("image"),
        "command": command,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "ports": [{"name": role, "containerPort": port}],
        "resources": resources,
    }
    if worker_container.get("imagePullPolicy"):
        container["imagePullPolicy"] = worker_container["imagePullPolicy"]
    pod_spec = {key: spec[key] for key in POD_FIELDS if key in spec}
    pod_spec |= {
        "containers": [container],
        "restartPolicy": "Never",  # replaced, never restarted
        "terminationGracePeriodSeconds": GRACE_SECONDS,
    }
    if affinity is not None:
        pod_spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.metadata.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_spec,
    }
