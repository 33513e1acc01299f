"""The Workload a PyTorchJob asks Kueue for: one PodSet per replica type (and the torchft
lighthouse), its priority, and its deterministic name."""

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller import torchft
from autoscaler.controller.kueue import (
    ANNOTATION_ELASTIC,
    ANNOTATION_REPLACEMENT_FOR,
    API_VERSION,
    GROUP,
    LABEL_JOB_UID,
    LABEL_PRIORITY_CLASS,
    LIGHTHOUSE_POD_SET,
    elastic,
    key,
)
from autoscaler.controller.naming import controller_reference


@dataclass(frozen=True)
class Queued:
    """What the integration reads besides the job: the Workloads the job controls, the
    ResourceFlavors by name, and the values of PriorityClasses and WorkloadPriorityClasses."""

    workloads: list[JSON] = field(default_factory=list)
    flavors: Mapping[str, JSON] = field(default_factory=dict)
    priorities: Mapping[str, int] = field(default_factory=dict)
    workload_priorities: Mapping[str, int] = field(default_factory=dict)


def pod_set_name(replica_type: str) -> str:
    """Kueue's `NewPodSetReference`: the replica type, lower-cased."""
    return replica_type.lower()


def replica_types(job: JSON) -> list[str]:
    """Master first, then Worker (Kueue's `OrderedReplicaTypes` for PyTorchJob)."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    return [name for name in (c.MASTER, c.WORKER) if name in specs]


def wanted(job: JSON) -> dict[str, int]:
    """The pod counts the job's spec asks for, by PodSet, the torchft lighthouse included."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    result = {pod_set_name(t): int(specs[t].get("replicas", 1)) for t in replica_types(job)}
    parsed = PyTorchJob.model_validate(job)
    if torchft.requested(parsed) and torchft.problem(parsed) is None:  # else no lighthouse runs
        result[LIGHTHOUSE_POD_SET] = 1
    return result


def priority(job: JSON, queued_: Queued) -> tuple[JSON | None, int]:
    """The Workload's priority reference and value: the WorkloadPriorityClass label first, then
    `runPolicy.schedulingPolicy.priorityClass`, then the first template's priorityClassName
    (Kueue's `ExtractPriority` and the Kubeflow adapter's `PriorityClass`)."""
    labels = job["metadata"].get("labels") or {}
    if name := labels.get(LABEL_PRIORITY_CLASS):
        ref = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": name}
        return ref, queued_.workload_priorities.get(name, 0)
    policy = (job["spec"].get("runPolicy") or {}).get("schedulingPolicy") or {}
    name = policy.get("priorityClass") or next(
        (
            pc
            for t in replica_types(job)
            if (
                pc := (
                    (job["spec"]["pytorchReplicaSpecs"][t].get("template") or {}).get("spec") or {}
                ).get("priorityClassName")
            )
        ),
        "",
    )
    if not name:
        return None, 0
    ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}
    return ref, queued_.priorities.get(name, 0)


def pod_sets(job: JSON, sizes: Mapping[str, int], *, like: JSON | None = None) -> list[JSON]:
    """One PodSet per replica type (and the lighthouse). A new slice copies the templates of
    the slice it replaces (`like`): the running job's carry the flavours' merged fields."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    templates = {pod_set_name(t): specs[t].get("template") or {} for t in replica_types(job)}
    if LIGHTHOUSE_POD_SET in sizes:
        pod = torchft.desired_lighthouse_pod(PyTorchJob.model_validate(job))
        templates[LIGHTHOUSE_POD_SET] = {
            "metadata": {"labels": pod["metadata"]["labels"]},
            "spec": pod["spec"],
        }
    if like is not None:
        templates |= {ps["name"]: ps.get("template") or {} for ps in like["spec"]["podSets"]}
    return [
        {"name": name, "count": sizes[name], "template": copy.deepcopy(template)}
        for name, template in templates.items()
    ]


def workload_name(job: JSON, *, slice_of: int | None = None) -> str:
    """`pytorchjob-<job>-<hash>` as Kueue names a job's Workload; a slice adds the job's
    generation to the hash (Kueue's `GenerateWorkloadNameWithExtra`), so a retried create of
    the same slice finds the first."""
    metadata = job["metadata"]
    seed = f"{metadata.get('uid', '')}/{c.KIND}" + ("" if slice_of is None else f"/{slice_of}")
    digest = hashlib.sha256(seed.encode()).hexdigest()[:5]
    return f"{c.KIND.lower()}-{metadata['name'][:240]}-{digest}"


def desired_workload(
    job: JSON, queued_: Queued, *, sizes: Mapping[str, int], replaces: JSON | None = None
) -> JSON:
    metadata = job["metadata"]
    ref, value = priority(job, queued_)
    annotations = {ANNOTATION_ELASTIC: "true"} if elastic(job) else {}
    if replaces is not None:
        annotations[ANNOTATION_REPLACEMENT_FOR] = key(replaces)
    spec: JSON = {
        "queueName": metadata["labels"][c.LABEL_KUEUE_QUEUE_NAME],
        "podSets": pod_sets(job, sizes, like=replaces),
        "priority": value,
    }
    if ref is not None:
        spec["priorityClassRef"] = ref
    workload: JSON = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(
                job, slice_of=metadata.get("generation", 0) if replaces is not None else None
            ),
            "namespace": metadata["namespace"],
            "labels": {LABEL_JOB_UID: metadata.get("uid", "")},
            "ownerReferences": [
                controller_reference(name=metadata["name"], uid=metadata.get("uid", ""))
            ],
        },
        "spec": spec,
    }
    if annotations:
        workload["metadata"]["annotations"] = annotations
    return workload
