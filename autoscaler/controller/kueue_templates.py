"""Starting and stopping a job for Kueue: the assigned flavours' node labels and tolerations merged
into its pod templates on admission, and restored from the Workload on eviction (`pkg/podset`)."""

import copy
from collections.abc import Mapping
from typing import Final

from autoscaler.api.models import JSON
from autoscaler.controller.kueue_workload import pod_set_name, replica_types

# The template fields Kueue merges on start and restores on stop (`pkg/podset`).
MERGED_FIELDS: Final = ("nodeSelector", "tolerations")


def assigned(workload: JSON, flavors: Mapping[str, JSON]) -> dict[str, JSON]:
    """Per PodSet, what admission adds to its pods: the assigned flavours' node labels and
    tolerations (Kueue's `getPodSetsInfoFromStatus`)."""
    result: dict[str, JSON] = {}
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        selector: dict[str, str] = {}
        tolerations: list[JSON] = []
        for name in sorted(set((assignment.get("flavors") or {}).values())):
            flavor_spec = (flavors.get(name) or {}).get("spec") or {}
            selector |= flavor_spec.get("nodeLabels") or {}
            tolerations += [t for t in flavor_spec.get("tolerations") or [] if t not in tolerations]
        result[assignment["name"]] = {"nodeSelector": selector, "tolerations": tolerations}
    return result


def missing_flavors(workload: JSON, flavors: Mapping[str, JSON]) -> list[str]:
    admission = (workload.get("status") or {}).get("admission") or {}
    names = {
        name
        for assignment in admission.get("podSetAssignments") or []
        for name in (assignment.get("flavors") or {}).values()
    }
    return sorted(name for name in names if name not in flavors)


def started(job: JSON, workload: JSON, flavors: Mapping[str, JSON]) -> JSON:
    """The job unsuspended with the admission merged into each replica's template (Kueue's
    `podset.Merge`: node labels into the nodeSelector, tolerations appended)."""
    new = copy.deepcopy(job)
    new["spec"].setdefault("runPolicy", {})["suspend"] = False
    merged = assigned(workload, flavors)
    for replica_type in replica_types(new):
        info = merged.get(pod_set_name(replica_type))
        if info is None:
            continue
        spec = new["spec"]["pytorchReplicaSpecs"][replica_type].setdefault("template", {})
        pod = spec.setdefault("spec", {})
        if info["nodeSelector"]:
            pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **info["nodeSelector"]}
        tolerations = list(pod.get("tolerations") or [])
        tolerations += [t for t in info["tolerations"] if t not in tolerations]
        if tolerations:
            pod["tolerations"] = tolerations
    return new


def stopped(job: JSON, workload: JSON | None) -> JSON:
    """The job suspended, each template's merged fields put back as the Workload recorded them
    (Kueue's `RestorePodSetsInfo`)."""
    new = copy.deepcopy(job)
    new["spec"].setdefault("runPolicy", {})["suspend"] = True
    if workload is None:
        return new
    recorded = {ps["name"]: ps.get("template") or {} for ps in workload["spec"]["podSets"]}
    for replica_type in replica_types(new):
        original = (recorded.get(pod_set_name(replica_type)) or {}).get("spec") or {}
        pod = new["spec"]["pytorchReplicaSpecs"][replica_type].setdefault("template", {})
        pod_spec = pod.setdefault("spec", {})
        for name in MERGED_FIELDS:
            if name in original:
                pod_spec[name] = copy.deepcopy(original[name])
            else:
                pod_spec.pop(name, None)
    return new


def suspended(job: JSON) -> bool:
    return bool((job["spec"].get("runPolicy") or {}).get("suspend"))
