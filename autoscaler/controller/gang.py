"""Gang scheduling with Volcano or scheduler-plugins, as pure functions.

Upstream (kubeflow/training-operator v1.9: `pkg/controller.v1/common/job.go`, `scheduling.go`,
`util.go`, `pkg/controller.v1/control/podgroup_control.go`, the `--gang-scheduler-name` flag of
`cmd/training-operator.v1/main.go`): one PodGroup per job, named like it and owned by it; pods
carry the gang scheduler's name and the group's annotation or label; Volcano's pods are created
only once Volcano admitted the group (its phase left Pending); the group goes when the job ends.

One deliberate difference: for an elastic job the gang is its minimum (Master plus
`elasticPolicy.minReplicas`), not every replica, so the minimum starts all-or-nothing and
pods beyond it are never held back by the gang (see docs/pytorchjob.md).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.api.quantity import exact_quantity, format_quantity, is_binary_quantity
from autoscaler.controller.naming import owner_reference

VOLCANO: Final = "volcano"
SCHEDULER_PLUGINS: Final = "scheduler-plugins"
PODGROUP_KIND: Final = "PodGroup"
# Volcano's names (volcano.sh/apis v1.15: scheduling/v1beta1/labels.go, batch/v1alpha1/labels.go).
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION: Final = "volcano.sh/task-spec"
# scheduler-plugins' label (sigs.k8s.io/scheduler-plugins v0.34: apis/scheduling/v1alpha1).
SCHEDULER_PLUGINS_LABEL: Final = "scheduling.x-k8s.io/pod-group"
DEFAULT_QUEUE: Final = "default"
# Volcano phases in which the group is not admitted yet (upstream `DelayPodCreationDueToPodGroup`).
VOLCANO_NOT_ADMITTED: Final = ("", "Pending")
CUSTOM_SCHEDULER_MESSAGE: Final = (
    "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten"
)


@dataclass(frozen=True)
class PodGroupAPI:
    group: str
    version: str
    plural: str = "podgroups"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


VOLCANO_API: Final = PodGroupAPI("scheduling.volcano.sh", "v1beta1")
SCHEDULER_PLUGINS_API: Final = PodGroupAPI("scheduling.x-k8s.io", "v1alpha1")


@dataclass(frozen=True)
class GangScheduler:
    """The `--gang-scheduler-name` setting: `volcano` (any case), else scheduler-plugins, whose
    scheduler profile has this name (upstream treats any other name as scheduler-plugins)."""

    name: str

    @property
    def is_volcano(self) -> bool:
        return self.name.lower() == VOLCANO

    @property
    def scheduler_name(self) -> str:
        """What the pods' `spec.schedulerName` becomes (Volcano's scheduler is always "volcano")."""
        return VOLCANO if self.is_volcano else self.name

    @property
    def api(self) -> PodGroupAPI:
        return VOLCANO_API if self.is_volcano else SCHEDULER_PLUGINS_API


def gang_scheduler(name: str | None) -> GangScheduler | None:
    """The setting of the flag; None (no gang scheduling) when unset, as upstream's default."""
    return GangScheduler(name) if name else None


def min_member(job: PyTorchJob) -> int:
    """`schedulingPolicy.minAvailable` when set; else an elastic job's minimum (Master plus
    `minReplicas`), else every replica (upstream's total). `job` must be defaulted."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    elastic = job.spec.elastic_policy
    if elastic is not None and elastic.min_replicas is not None:
        return (1 if job.master is not None else 0) + elastic.min_replicas
    return sum(spec.replicas or 0 for spec in job.spec.pytorch_replica_specs.values())


def min_resources(job: PyTorchJob, *, members: int, priorities: Mapping[str, int]) -> JSON:
    """`schedulingPolicy.minResources`, else upstream's `CalcPGMinResources`: the requests of the
    first `members` pods, replica types taken by their PriorityClass value, highest first (an
    unknown class counts as 0; equal values keep Master before Worker, where upstream's order is
    Go's random map order). A container without requests counts its limits."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.min_resources is not None:
        return dict(policy.min_resources)
    replica_specs = job.spec.pytorch_replica_specs
    specs = [replica_specs[name] for name in c.REPLICA_TYPES if name in replica_specs]

    def priority(template: JSON) -> int:
        name = (template.get("spec") or {}).get("priorityClassName") or ""
        return priorities.get(name, 0)

    ordered = sorted(specs, key=lambda spec: -priority(spec.template or {}))
    totals: dict[str, Decimal] = {}
    binary: dict[str, bool] = {}
    counted = 0
    for spec in ordered:
        for _ in range(spec.replicas or 0):
            if counted >= members:
                break
            counted += 1
            for name, amount in _pod_requests(spec.template or {}).items():
                totals[name] = totals.get(name, Decimal(0)) + exact_quantity(amount)
                binary.setdefault(name, is_binary_quantity(amount))
    return {name: format_quantity(total, binary=binary[name]) for name, total in totals.items()}


def _pod_requests(template: JSON) -> dict[str, str | int | float]:
    """Each container's requests, or its limits when it has no requests (upstream
    `AddResourceList`); summed by the caller. Init containers are not counted, as upstream."""
    merged: dict[str, list[str | int | float]] = {}
    for container in (template.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        chosen = resources["requests"] if "requests" in resources else resources.get("limits")
        for name, amount in (chosen or {}).items():
            merged.setdefault(name, []).append(amount)
    return {name: _sum_text(amounts) for name, amounts in merged.items()}


def _sum_text(amounts: list[str | int | float]) -> str | int | float:
    if len(amounts) == 1:
        return amounts[0]
    total = sum((exact_quantity(amount) for amount in amounts), Decimal(0))
    return format_quantity(total, binary=is_binary_quantity(amounts[0]))


def desired_podgroup(
    job: PyTorchJob, gang: GangScheduler, *, priorities: Mapping[str, int], current: JSON | None
) -> JSON:
    """The job's PodGroup. Created with the job's annotations and owned by it; its spec is
    rewritten whole on every pass, except that Volcano's queue, once set, stays."""
    members = min_member(job)
    resources = min_resources(job, members=members, priorities=priorities)
    policy = job.spec.run_policy.scheduling_policy
    spec: JSON = {"minMember": members}
    if gang.is_volcano:
        queue = ((current or {}).get("spec") or {}).get("queue") or (
            policy.queue if policy is not None and policy.queue else DEFAULT_QUEUE
        )
        spec["queue"] = queue
        if policy is not None and policy.priority_class:
            spec["priorityClassName"] = policy.priority_class
        spec["minResources"] = resources
    else:
        spec["minResources"] = resources
        if policy is not None and policy.schedule_timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    metadata: JSON = {
        "name": job.name,
        "namespace": job.metadata.namespace,
        "ownerReferences": [owner_reference(job)],
    }
    if job.metadata.annotations:
        metadata["annotations"] = dict(job.metadata.annotations)
    return {
        "apiVersion": gang.api.api_version,
        "kind": PODGROUP_KIND,
        "metadata": metadata,
        "spec": spec,
    }


def decorate_pod(pod: JSON, *, job: PyTorchJob, gang: GangScheduler, replica_type: str) -> JSON:
    """The pod with the gang scheduler's name (unless its template names one) and the group's
    annotations (Volcano) or label (scheduler-plugins)."""
    spec, metadata = dict(pod["spec"]), dict(pod["metadata"])
    if not spec.get("schedulerName"):
        spec["schedulerName"] = gang.scheduler_name
    if gang.is_volcano:
        metadata["annotations"] = {
            **(metadata.get("annotations") or {}),
            VOLCANO_GROUP_ANNOTATION: job.name,
            VOLCANO_TASK_ANNOTATION: replica_type.lower(),
        }
    else:
        metadata["labels"] = {**(metadata.get("labels") or {}), SCHEDULER_PLUGINS_LABEL: job.name}
    return {**pod, "metadata": metadata, "spec": spec}


def custom_scheduler_set(job: PyTorchJob, gang: GangScheduler) -> bool:
    """A replica template names another scheduler: upstream warns and leaves it."""
    for spec in job.spec.pytorch_replica_specs.values():
        name = ((spec.template or {}).get("spec") or {}).get("schedulerName")
        if name and name != gang.scheduler_name:
            return True
    return False


def pods_may_start(gang: GangScheduler, podgroup: JSON | None) -> bool:
    """Volcano's pods wait until Volcano admitted the group (its phase left Pending, e.g.
    Inqueue); scheduler-plugins' pods are created at once and wait in the scheduler."""
    if not gang.is_volcano:
        return True
    if podgroup is None:
        return False
    return str((podgroup.get("status") or {}).get("phase") or "") not in VOLCANO_NOT_ADMITTED


def bound_pods(pods: list[JSON]) -> int:
    """Pods a scheduler placed (bound to a node) and that have not ended."""
    return sum(
        1
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
