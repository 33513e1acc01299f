"""The PyTorchJob API: typed models, upstream defaulting, validation and the CRD."""

from autoscaler.api.defaults import default_job
from autoscaler.api.models import (
    ElasticPolicy,
    JobCondition,
    JobStatus,
    PyTorchJob,
    PyTorchJobSpec,
    ReplicaSpec,
    ReplicaStatus,
    RunPolicy,
    SchedulingPolicy,
)

__all__ = [
    "ElasticPolicy",
    "JobCondition",
    "JobStatus",
    "PyTorchJob",
    "PyTorchJobSpec",
    "ReplicaSpec",
    "ReplicaStatus",
    "RunPolicy",
    "SchedulingPolicy",
    "default_job",
]
