"""Typed models of the `kubeflow.org/v1` PyTorchJob, field for field as upstream (v1.9).

Optional fields are `None` when absent, as upstream's pointers are nil; `defaults.py` fills them
the way the upstream operator does. Pod templates stay plain JSON (`dict`): the operator copies
them into pods, and their schema is the API server's own (see `crd.py`).
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from autoscaler.api import coordinates as c

JSON = dict[str, Any]
RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["None", "Running", "All"]
RdzvBackend = Literal["c10d", "etcd", "etcd-v2"]
ConditionType = Literal[
    "Created",
    "Running",
    "Restarting",
    "Succeeded",
    "Suspended",
    "Failed",
    "HorizontalPodAutoscaler",
    "GangScheduled",
    "FaultTolerance",
    "Rendezvous",
    "QuotaAdmitted",
]

# Markers read by the CRD generator: the schema of this field is the API server's own type.
POD_TEMPLATE_SPEC = "io.k8s.api.core.v1.PodTemplateSpec"
METRIC_SPEC = "io.k8s.api.autoscaling.v2.MetricSpec"


def int32(**schema: Any) -> Any:
    return Field(default=None, json_schema_extra={"format": "int32", **schema})


def k8s_type(name: str) -> Any:
    return Field(default=None, json_schema_extra={"x-autoscaler-openapi": name})


class Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are the schema's business."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    def to_json(self) -> JSON:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class RDZVConf(Model):
    key: str | None = Field(default=None, json_schema_extra={"maxLength": 256})
    value: str | None = Field(default=None, json_schema_extra={"maxLength": 4096})


class ElasticPolicy(Model):
    min_replicas: int | None = int32(minimum=1)
    max_replicas: int | None = int32(minimum=1)
    rdzv_backend: RdzvBackend | None = None
    rdzv_port: int | None = int32(minimum=1, maximum=65535)
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    # maxItems bounds the CEL rule that judges every entry (the API server's cost estimate).
    rdzv_conf: list[RDZVConf] | None = Field(default=None, json_schema_extra={"maxItems": 64})
    standalone: bool | None = None
    n_proc_per_node: int | None = int32(
        description="Deprecated: use spec.nprocPerNode. Rejected together with it."
    )
    max_restarts: int | None = int32(minimum=0)
    metrics: list[JSON] | None = Field(
        default=None,
        json_schema_extra={"items": {"x-autoscaler-openapi": METRIC_SPEC}, "minItems": 1},
        description="autoscaling/v2 MetricSpecs; when set, the operator creates an HPA.",
    )


class SchedulingPolicy(Model):
    min_available: int | None = int32(minimum=0)
    queue: str | None = None
    min_resources: dict[str, int | str] | None = Field(
        default=None,
        json_schema_extra={"additionalProperties": {"x-kubernetes-int-or-string": True}},
    )
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = int32(minimum=0)


class RunPolicy(Model):
    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: int | None = int32(minimum=0)
    active_deadline_seconds: int | None = Field(
        default=None, json_schema_extra={"format": "int64", "minimum": 0}
    )
    backoff_limit: int | None = int32(minimum=0)
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = Field(default=None, json_schema_extra={"default": False})
    managed_by: Literal["kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"] | None = None


class ReplicaSpec(Model):
    replicas: int | None = int32(minimum=1, default=1)
    template: JSON | None = k8s_type(POD_TEMPLATE_SPEC)
    restart_policy: RestartPolicy | None = Field(
        default=None, json_schema_extra={"default": c.DEFAULT_RESTART_POLICY}
    )


class PyTorchJobSpec(Model):
    # Upstream's Go type always serialises runPolicy; defaulting it to {} lets suspend default too.
    run_policy: RunPolicy = Field(default_factory=RunPolicy, json_schema_extra={"default": {}})
    elastic_policy: ElasticPolicy | None = None
    pytorch_replica_specs: dict[str, ReplicaSpec] = Field(
        json_schema_extra={"minProperties": 1, "maxProperties": len(c.REPLICA_TYPES)}
    )
    # Judged by a CEL rule that names the forms torchrun accepts (a pattern's message would only
    # print the regex); maxLength bounds its cost.
    nproc_per_node: str | None = Field(default=None, json_schema_extra={"maxLength": 63})


class ReplicaStatus(Model):
    active: int | None = int32()
    succeeded: int | None = int32()
    failed: int | None = int32()
    label_selector: JSON | None = Field(
        default=None,
        json_schema_extra={
            "x-autoscaler-openapi": "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"
        },
        description="Deprecated: use selector.",
    )
    selector: str | None = None


class JobCondition(Model):
    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_update_time: datetime | None = None
    last_transition_time: datetime | None = None


class JobStatus(Model):
    conditions: list[JobCondition] | None = None
    replica_statuses: dict[str, ReplicaStatus] | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    last_reconcile_time: datetime | None = None


class ObjectMeta(Model):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PyTorchJob(Model):
    api_version: str = c.API_VERSION
    kind: str = c.KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PyTorchJobSpec
    status: JobStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def worker(self) -> ReplicaSpec | None:
        return self.spec.pytorch_replica_specs.get(c.WORKER)

    @property
    def master(self) -> ReplicaSpec | None:
        return self.spec.pytorch_replica_specs.get(c.MASTER)
