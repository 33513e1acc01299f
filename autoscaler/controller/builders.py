"""Pure builders of what a job should own: its pods, headless services and HPA (as JSON)."""

import copy

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller.env import pytorch_container, torchrun_env, with_env
from autoscaler.controller.naming import (
    is_master_role,
    owner_reference,
    replica_labels,
    replica_name,
)

DEFAULT_INIT_IMAGE = "alpine:3.10"
INIT_CONTAINER_NAME = "init-pytorch"
INIT_MAX_TRIES = 100
# ExitCode is the operator's own policy: the kubelet never restarts, the operator decides.
POD_RESTART_POLICY = {"ExitCode": "Never"}


def desired_pod(
    job: PyTorchJob, *, replica_type: str, index: int, init_image: str = DEFAULT_INIT_IMAGE
) -> JSON:
    """Pod `index` of a replica type; `job` must be defaulted (see `api.default_job`)."""
    spec = job.spec.pytorch_replica_specs[replica_type]
    template = copy.deepcopy(spec.template or {})
    template_meta = template.get("metadata") or {}
    labels = {
        **(template_meta.get("labels") or {}),
        **replica_labels(job_name=job.name, replica_type=replica_type, index=index),
    }
    if is_master_role(job, replica_type=replica_type, index=index):
        labels[c.LABEL_JOB_ROLE] = "master"
    env = torchrun_env(job, replica_type=replica_type, index=index)
    elastic = job.spec.elastic_policy is not None
    pod_spec = dict(template.get("spec") or {})
    pod_spec["containers"] = [
        with_env(container, env=env, elastic=elastic) for container in pod_spec["containers"]
    ]
    restart = spec.restart_policy or c.DEFAULT_RESTART_POLICY
    pod_spec["restartPolicy"] = POD_RESTART_POLICY.get(restart, restart)
    if job.master is not None and replica_type == c.WORKER:
        master = replica_name(job_name=job.name, replica_type=c.MASTER, index=0)
        init = init_container(master_address=master, image=init_image)
        pod_spec["initContainers"] = [*(pod_spec.get("initContainers") or []), init]
    metadata = {
        "name": replica_name(job_name=job.name, replica_type=replica_type, index=index),
        "namespace": job.metadata.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }
    if template_meta.get("annotations"):
        metadata["annotations"] = dict(template_meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def init_container(*, master_address: str, image: str) -> JSON:
    """Upstream's `init-pytorch`: wait until the master's service name resolves."""
    script = (
        f"err=1;for i in $(seq {INIT_MAX_TRIES}); do if nslookup {master_address}; "
        "then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err"
    )
    return {
        "name": INIT_CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "limits": {"cpu": "100m", "memory": "20Mi"},
            "requests": {"cpu": "50m", "memory": "10Mi"},
        },
        "command": ["sh", "-c", script],
    }


def desired_service(job: PyTorchJob, *, replica_type: str, index: int) -> JSON:
    """The headless service that gives pod `index` a stable DNS name."""
    labels = replica_labels(job_name=job.name, replica_type=replica_type, index=index)
    spec = job.spec.pytorch_replica_specs[replica_type]
    ports = [
        {"name": port.get("name", ""), "port": port["containerPort"]}
        for port in pytorch_container(spec.template or {}).get("ports") or []
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": replica_name(job_name=job.name, replica_type=replica_type, index=index),
            "namespace": job.metadata.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {"clusterIP": "None", "selector": dict(labels), "ports": ports},
    }


def desired_hpa(job: PyTorchJob) -> JSON | None:
    """The HPA for `elasticPolicy.metrics`, acting on the job's scale subresource; else None."""
    policy = job.spec.elastic_policy
    if policy is None or not policy.metrics:
        return None
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": job.name,
            "namespace": job.metadata.namespace,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": job.name},
            "minReplicas": policy.min_replicas,
            "maxReplicas": policy.max_replicas,
            "metrics": copy.deepcopy(policy.metrics),
        },
    }


def desired_objects(job: PyTorchJob) -> list[JSON]:
    """Every object the operator creates for the job at its current replica counts."""
    hpa = desired_hpa(job)
    objects: list[JSON] = [] if hpa is None else [hpa]
    for replica_type in c.REPLICA_TYPES:
        spec = job.spec.pytorch_replica_specs.get(replica_type)
        for index in range(spec.replicas or 0 if spec is not None else 0):
            objects.append(desired_pod(job, replica_type=replica_type, index=index))
            objects.append(desired_service(job, replica_type=replica_type, index=index))
    return objects
