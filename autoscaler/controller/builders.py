"""Pure builders of what a job should own: its pods, headless services and HPA (as JSON)."""

import copy
import re
from dataclasses import dataclass
from typing import Any

import yaml

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller import placement, planned_placement, rendezvous, torchft
from autoscaler.controller.env import pytorch_container, torchrun_env, with_env
from autoscaler.controller.gang import GangScheduler, decorate_pod, desired_podgroup
from autoscaler.controller.naming import (
    is_master_role,
    owner_reference,
    replica_labels,
    replica_name,
)

INIT_CONTAINER_NAME = "init-pytorch"
# Upstream's init container (`pkg/controller.v1/pytorch/initcontainer.go`, v1.9), as the Go
# template its `--pytorch-init-container-template-file` replaces: the same three fields.
DEFAULT_INIT_TEMPLATE = """\
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; \
then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']
"""
_TEMPLATE_FIELD = re.compile(r"{{\s*\.(\w+)\s*}}")
_TEMPLATE_ACTION = re.compile(r"{{.*?}}", re.S)
# ExitCode is the operator's own policy: the kubelet never restarts, the operator decides.
POD_RESTART_POLICY = {"ExitCode": "Never"}


@dataclass(frozen=True)
class InitContainers:
    """What upstream's `--pytorch-init-container-*` flags set: the containers a Worker of a
    Master+Worker job waits in until the master's service name resolves."""

    image: str = "alpine:3.10"
    max_tries: int = 100
    template: str = DEFAULT_INIT_TEMPLATE

    def __post_init__(self) -> None:
        if self.max_tries < 1:
            raise ValueError(f"init container max tries must be at least 1, not {self.max_tries}")
        self.render(master_address="probe-master-0")  # a bad template fails at start, not per pod

    def render(self, *, master_address: str) -> list[JSON]:
        values = {
            "MasterAddr": master_address,
            "InitContainerImage": self.image,
            "MaxTries": str(self.max_tries),
        }

        def field(match: re.Match[str]) -> str:
            if match.group(1) not in values:
                raise ValueError(
                    f"init container template: unknown field {match.group(0)} "
                    f"(it may use {', '.join('{{.' + name + '}}' for name in values)})"
                )
            return values[match.group(1)]

        text = _TEMPLATE_FIELD.sub(field, self.template)
        if action := _TEMPLATE_ACTION.search(text):
            raise ValueError(f"init container template: unsupported action {action.group(0)}")
        try:
            containers: Any = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"init container template is not YAML: {error}") from None
        if not isinstance(containers, list) or not all(
            isinstance(item, dict) and item.get("name") for item in containers
        ):
            raise ValueError("init container template must be a YAML list of named containers")
        return containers


@dataclass(frozen=True)
class PodSettings:
    """The operator's settings that shape every pod it builds (its command-line flags)."""

    init: InitContainers = InitContainers()
    # --planned-placement: the resource whose workers the operator places (None: the scheduler).
    placement_resource: str | None = None


UPSTREAM_DEFAULTS = PodSettings()  # upstream's flag defaults


def desired_pod(
    job: PyTorchJob,
    *,
    replica_type: str,
    index: int,
    settings: PodSettings = UPSTREAM_DEFAULTS,
    gang: GangScheduler | None = None,
    lighthouse_uid: str | None = None,
) -> JSON:
    """Pod `index` of a replica type; `job` must be defaulted (see `api.default_job`); in torchft
    mode a worker is stamped with the uid of the lighthouse it joins."""
    spec = job.spec.pytorch_replica_specs[replica_type]
    template = copy.deepcopy(spec.template or {})
    template_meta = template.get("metadata") or {}
    labels = {
        **(template_meta.get("labels") or {}),
        **replica_labels(job_name=job.name, replica_type=replica_type, index=index),
    }
    if is_master_role(job, replica_type=replica_type, index=index):
        labels[c.LABEL_JOB_ROLE] = "master"
    fault_tolerant = torchft.requested(job)
    env = (  # torchft: no torchrun rendezvous, each worker is a replica group
        torchft.worker_env(job, index=index)
        if fault_tolerant
        else torchrun_env(
            job,
            replica_type=replica_type,
            index=index,
            store=rendezvous.endpoint(job.name) if rendezvous.requested(job) else None,
        )
    )
    elastic = job.spec.elastic_policy is not None and not fault_tolerant
    pod_spec = dict(template.get("spec") or {})
    pod_spec["containers"] = [
        with_env(
            container, env=_not_set_by(container, env) if fault_tolerant else env, elastic=elastic
        )
        for container in pod_spec["containers"]
    ]
    if placement.wants_packing(job, replica_type=replica_type):
        pod_spec["affinity"] = placement.packed_with_workers(job, own=pod_spec.get("affinity"))
    resource = settings.placement_resource
    if resource and planned_placement.qualifies(job, replica_type=replica_type, resource=resource):
        gates = list(pod_spec.get("schedulingGates") or [])
        pod_spec["schedulingGates"] = [*gates, {"name": planned_placement.GATE}]
    restart = spec.restart_policy or c.DEFAULT_RESTART_POLICY
    pod_spec["restartPolicy"] = POD_RESTART_POLICY.get(restart, restart)
    if job.master is not None and replica_type == c.WORKER:
        master = replica_name(job_name=job.name, replica_type=c.MASTER, index=0)
        init = settings.init.render(master_address=master)
        pod_spec["initContainers"] = [*(pod_spec.get("initContainers") or []), *init]
    metadata = {
        "name": replica_name(job_name=job.name, replica_type=replica_type, index=index),
        "namespace": job.metadata.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }
    annotations = dict(template_meta.get("annotations") or {})
    if lighthouse_uid is not None:
        annotations[torchft.ANNOTATION_LIGHTHOUSE_UID] = lighthouse_uid
    if annotations:
        metadata["annotations"] = annotations
    if template_meta.get("finalizers"):  # upstream's pod control copies them too
        metadata["finalizers"] = list(template_meta["finalizers"])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
    if gang is None:
        return pod
    return decorate_pod(pod, job=job, gang=gang, replica_type=replica_type)


def _not_set_by(container: JSON, env: list[JSON]) -> list[JSON]:
    """torchft's tunables a container sets itself stay its own (a later duplicate would win)."""
    own = {var.get("name") for var in container.get("env") or []}
    return [var for var in env if var["name"] not in own]


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


def desired_objects(
    job: PyTorchJob,
    *,
    settings: PodSettings = UPSTREAM_DEFAULTS,
    gang: GangScheduler | None = None,
) -> list[JSON]:
    """Every object the operator creates for the job at its current replica counts (with gang
    scheduling: its PodGroup first; minResources as if no PriorityClass existed)."""
    hpa = desired_hpa(job)
    objects: list[JSON] = [] if hpa is None else [hpa]
    if gang is not None:
        objects.append(desired_podgroup(job, gang, priorities={}, current=None))
    for replica_type in c.REPLICA_TYPES:
        spec = job.spec.pytorch_replica_specs.get(replica_type)
        for index in range(spec.replicas or 0 if spec is not None else 0):
            objects.append(
                desired_pod(
                    job, replica_type=replica_type, index=index, settings=settings, gang=gang
                )
            )
            objects.append(desired_service(job, replica_type=replica_type, index=index))
    return objects
