"""Upstream defaulting (`SetDefaults_PyTorchJob`, v1.9), as pure functions returning new objects.

Upstream applies these in memory on every reconcile and never persists them; the CRD here
additionally persists `replicas: 1` and `restartPolicy: OnFailure` so that `/scale` always works.
"""

from typing import Any, TypeVar

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, ElasticPolicy, PyTorchJob, ReplicaSpec, RunPolicy

Fallback = TypeVar("Fallback", bound=int | None)


def default_job(job: PyTorchJob) -> PyTorchJob:
    """The job as the operator sees it: every upstream default applied, the input untouched."""
    specs = {
        camel_case_replica_type(name): default_replica_spec(spec)
        for name, spec in job.spec.pytorch_replica_specs.items()
    }
    worker = specs.get(c.WORKER)
    elastic = job.spec.elastic_policy
    if elastic is not None:
        elastic = default_elastic_policy(
            elastic, worker_replicas=worker.replicas if worker else None
        )
    spec = job.spec.model_copy(
        update={
            "run_policy": default_run_policy(job.spec.run_policy),
            "pytorch_replica_specs": specs,
            "elastic_policy": elastic,
            "nproc_per_node": default_nproc_per_node(
                nproc_per_node=job.spec.nproc_per_node, elastic=job.spec.elastic_policy
            ),
        }
    )
    return job.model_copy(update={"spec": spec})


def camel_case_replica_type(name: str) -> str:
    """`worker` -> `Worker`, `MASTER` -> `Master`; other names are left alone."""
    for known in c.REPLICA_TYPES:
        if name.lower() == known.lower():
            return known
    return name


def default_run_policy(policy: RunPolicy) -> RunPolicy:
    if policy.clean_pod_policy is not None:
        return policy
    return policy.model_copy(update={"clean_pod_policy": c.DEFAULT_CLEAN_POD_POLICY})


def default_replica_spec(spec: ReplicaSpec) -> ReplicaSpec:
    return spec.model_copy(
        update={
            "replicas": 1 if spec.replicas is None else spec.replicas,
            "restart_policy": spec.restart_policy or c.DEFAULT_RESTART_POLICY,
            "template": default_template_port(spec.template or {}),
        }
    )


def default_template_port(template: JSON) -> JSON:
    """Add `pytorchjob-port: 23456` to the `pytorch` container (else the first) if missing."""
    pod_spec: dict[str, Any] = dict(template.get("spec") or {})
    containers = [dict(container) for container in pod_spec.get("containers") or []]
    if not containers:
        return template
    index = next(
        (i for i, cont in enumerate(containers) if cont.get("name") == c.DEFAULT_CONTAINER_NAME), 0
    )
    ports = list(containers[index].get("ports") or [])
    if any(port.get("name") == c.DEFAULT_PORT_NAME for port in ports):
        return template
    ports.append({"name": c.DEFAULT_PORT_NAME, "containerPort": c.DEFAULT_PORT})
    containers[index]["ports"] = ports
    pod_spec["containers"] = containers
    return {**template, "spec": pod_spec}


def default_elastic_policy(policy: ElasticPolicy, *, worker_replicas: int | None) -> ElasticPolicy:
    """The policy with its bounds defaulted (`default_bounds`) from the Worker replicas."""
    low, high = default_bounds(policy.min_replicas, policy.max_replicas, replicas=worker_replicas)
    return policy.model_copy(update={"min_replicas": low, "max_replicas": high})


def default_bounds(
    low: int | None, high: int | None, *, replicas: Fallback
) -> tuple[int | Fallback, int | Fallback]:
    """Missing bounds take the other bound, or the Worker `replicas` when both are missing."""
    if high is None:
        return (replicas, replicas) if low is None else (low, low)
    return (high if low is None else low), high


def default_nproc_per_node(
    *, nproc_per_node: str | None, elastic: ElasticPolicy | None
) -> str | None:
    """`auto`, unless set or unless the deprecated `elasticPolicy.nProcPerNode` is set."""
    if nproc_per_node is not None:
        return nproc_per_node
    if elastic is not None and elastic.n_proc_per_node is not None:
        return None
    return c.DEFAULT_NPROC_PER_NODE
