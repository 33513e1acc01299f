"""The kinds of job the engine's Kubernetes adapter sizes: one `JobKind` each.

A kind holds all the adapter cannot know of it: where its objects are served, how one reads as
the engine's `ManagedJob`, which pods are its workers, and the spec patch that suspends or resumes
it. The rest is the same for any elastic workload with a `scale` subresource (autoscaling/v1
Scale reads and writes, the resourceVersion guards, the engine's annotations, Events), and stays
in `engine_cluster`. PyTorchJob is the only kind the product sizes (`PYTORCHJOB`); see "Job kinds"
in docs/architecture.md for where another plugs in.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autoscaler.api import coordinates as c
from autoscaler.clients.jobs import managed_job, worker_job
from autoscaler.clients.kube import JOBS, Resource
from autoscaler.engine.ports import JobKey, ManagedJob

JSON = dict[str, Any]


class QueueingSpec(Protocol):
    def __call__(self, *, suspend: bool, replicas: int | None) -> JSON:
        """The `spec` of the merge patch that suspends or resumes a job of the kind (`replicas`:
        the worker count written with a resume; None: the count is left as it is)."""
        ...


@dataclass(frozen=True)
class JobKind:
    """One kind of elastic job, as the engine's adapter reads, scales, suspends and resumes it."""

    kind: str  # the objects' `kind`, as Events name it
    resource: Resource  # where its objects are served: group, version, plural
    # Its JSON as the engine's typed view; None for an object the engine has nothing to do with.
    # Raises KeyError, TypeError or ValueError for one it cannot read (a Warning Event, not sized).
    managed_job: Callable[[Mapping[str, Any]], ManagedJob | None]
    # The job whose worker a pod is (the pods counted for its health and left out of the free
    # capacity while the engine sizes it); None for any other pod.
    worker_of: Callable[[Mapping[str, Any]], JobKey | None]
    queueing_spec: QueueingSpec

    @property
    def api_version(self) -> str:
        return f"{self.resource.group}/{self.resource.version}" if self.resource.group else "v1"

    def scale_path(self, namespace: str, name: str) -> str:
        """The job's `scale` subresource, read and written as an autoscaling/v1 Scale."""
        return self.resource.path(namespace, name, "scale")

    def queueing_patch(
        self,
        job: ManagedJob,
        *,
        suspend: bool,
        annotations: Mapping[str, str | None],
        replicas: int | None = None,
    ) -> JSON:
        """The merge patch that suspends or resumes the job, under the version it was read at."""
        metadata = {"resourceVersion": job.resource_version, "annotations": dict(annotations)}
        return {
            "metadata": metadata,
            "spec": self.queueing_spec(suspend=suspend, replicas=replicas),
        }


def pytorchjob_queueing_spec(*, suspend: bool, replicas: int | None) -> JSON:
    """A PyTorchJob is suspended by its run policy; its worker count is the Worker replicas."""
    spec: JSON = {"runPolicy": {"suspend": suspend}}
    if replicas is not None:
        spec["pytorchReplicaSpecs"] = {c.WORKER: {"replicas": replicas}}
    return spec


PYTORCHJOB = JobKind(
    kind=c.KIND,
    resource=JOBS,
    managed_job=managed_job,
    worker_of=worker_job,
    queueing_spec=pytorchjob_queueing_spec,
)
