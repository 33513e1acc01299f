"""The operator's own Kueue integration for PyTorchJob, as pure functions of observed objects.

What Kueue's job integrations do (sigs.k8s.io/kueue v0.19, `pkg/controller/jobframework/
reconciler.go`, `ReconcileGenericJob`), for a kind Kueue lists in
`integrations.externalFrameworks` and so leaves to its own controller: hold a labelled job
suspended until its Workload is admitted, create and own that Workload (one PodSet per replica
type), start the job with each assigned flavour's node labels and tolerations merged into its
templates, stop it (templates restored from the Workload) when Kueue evicts the Workload, then
hand the quota back, and mark the Workload finished with the job.

Elastic jobs (`kueue.x-k8s.io/elastic-job: "true"`) follow Kueue's workload slices
(`pkg/workloadslicing`): a scale-up of an admitted job is a new Workload annotated as the
replacement of the admitted one, which Kueue's scheduler admits against quota and then finishes
the old one; a scale-down lowers the admitted Workload's counts in place, which frees quota at
once. Until the new slice is admitted the job's pods stay at the admitted counts (`admitted`).
"""

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.api.timestamps import format_timestamp
from autoscaler.controller import torchft
from autoscaler.controller.naming import controller_reference

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
# This kind as Kueue's `integrations.externalFrameworks` names it (Kind.version.group).
EXTERNAL_FRAMEWORK: Final = f"{c.KIND}.{c.VERSION}.{c.GROUP}"
ANNOTATION_ELASTIC: Final = c.ANNOTATION_KUEUE_ELASTIC
ANNOTATION_REPLACEMENT_FOR: Final = f"{GROUP}/workload-slice-replacement-for"
LABEL_JOB_UID: Final = f"{GROUP}/job-uid"
LABEL_PRIORITY_CLASS: Final = f"{GROUP}/priority-class"  # a WorkloadPriorityClass's name
# Kueue's own integrations put it on their Workloads; a taken-over one may carry it.
FINALIZER: Final = f"{GROUP}/resource-in-use"
# Workload condition types and reasons (Kueue's `apis/kueue/v1beta2/workload_types.go`).
QUOTA_RESERVED, ADMITTED, EVICTED = "QuotaReserved", "Admitted", "Evicted"
FINISHED, REQUEUED = "Finished", "Requeued"
PREEMPTED, NODE_FAILURES = "Preempted", "NodeFailures"  # the evictions Kueue requeues at once
PENDING_EVALUATION = "PendingEvaluation"
LIGHTHOUSE_POD_SET: Final = torchft.LIGHTHOUSE_TYPE
# The template fields Kueue merges on start and restores on stop (`pkg/podset`).
MERGED_FIELDS: Final = ("nodeSelector", "tolerations")


@dataclass(frozen=True)
class Queued:
    """What the integration reads besides the job: the Workloads the job controls, the
    ResourceFlavors by name, and the values of PriorityClasses and WorkloadPriorityClasses."""

    workloads: list[JSON] = field(default_factory=list)
    flavors: Mapping[str, JSON] = field(default_factory=dict)
    priorities: Mapping[str, int] = field(default_factory=dict)
    workload_priorities: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Step:
    """The writes of one pass. `job`: the job with a new spec (suspend and templates), written
    before anything else; `status`: Workloads with a new status (PUT /status); `admitted`: the
    replica counts its pods may run at now (None: the spec's)."""

    create: list[JSON] = field(default_factory=list)
    update: list[JSON] = field(default_factory=list)
    status: list[JSON] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    job: JSON | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    admitted: dict[str, int] | None = None

    @property
    def holds(self) -> bool:
        """The job's spec changes first: the pod planner waits for the next pass."""
        return self.job is not None


def queued(job: JSON) -> bool:
    return bool(((job.get("metadata") or {}).get("labels") or {}).get(c.LABEL_KUEUE_QUEUE_NAME))


def elastic(job: JSON) -> bool:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_ELASTIC) == "true"


# -- reading Workloads ----------------------------------------------------------------------


def _conditions(workload: JSON) -> list[JSON]:
    return list((workload.get("status") or {}).get("conditions") or [])


def has(workload: JSON, type_: str) -> bool:
    return any(cond["type"] == type_ and cond["status"] == "True" for cond in _conditions(workload))


def reserved(workload: JSON) -> bool:
    return has(workload, QUOTA_RESERVED) and bool((workload.get("status") or {}).get("admission"))


def is_admitted(workload: JSON) -> bool:
    return has(workload, ADMITTED) and reserved(workload)


def counts(workload: JSON) -> dict[str, int]:
    return {ps["name"]: int(ps.get("count", 1)) for ps in workload["spec"]["podSets"]}


def key(workload: JSON) -> str:
    """Kueue's workload reference, `namespace/name` (the replacement annotation's value)."""
    return f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"


def _created(workload: JSON) -> tuple[str, str]:
    return workload["metadata"].get("creationTimestamp", ""), workload["metadata"].get("uid", "")


def chain(workloads: list[JSON]) -> tuple[JSON | None, JSON | None]:
    """(the admitted slice, the pending one replacing it), as Kueue's `normalizeActiveSlices`
    picks them from the unfinished Workloads: the newest non-evicted one with quota whose
    replacement holds none, and its replacement. Without an admitted one: (None, the newest
    non-evicted)."""
    live = sorted((w for w in workloads if not has(w, FINISHED)), key=_created)
    replacing = {
        w["metadata"]["annotations"][ANNOTATION_REPLACEMENT_FOR]: w
        for w in live
        if ANNOTATION_REPLACEMENT_FOR in (w["metadata"].get("annotations") or {})
        and not has(w, EVICTED)
    }
    current, newest = None, None
    for workload in live:
        if has(workload, EVICTED):
            continue
        newest = workload
        successor = replacing.get(key(workload))
        if reserved(workload) and not (successor is not None and reserved(successor)):
            current = workload
    if current is None:
        return None, newest
    return current, replacing.get(key(current))


# -- desired Workloads -----------------------------------------------------------------------


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


# -- starting and stopping -------------------------------------------------------------------


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


def active(job: JSON) -> bool:
    """Pods still run (Kueue's `IsActive` for Kubeflow jobs: any replica status active)."""
    statuses = (job.get("status") or {}).get("replicaStatuses") or {}
    return any(int((s or {}).get("active") or 0) > 0 for s in statuses.values())


def finished(job: JSON) -> tuple[str, str] | None:
    """(reason, message) of the job's Succeeded or Failed condition, None while it runs."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond["type"] in ("Succeeded", "Failed") and cond["status"] == "True":
            return cond["type"], cond.get("message", "")
    return None


def _condition(type_: str, status: str, reason: str, message: str, now: datetime) -> JSON:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_timestamp(now),
    }


def _set(conditions: list[JSON], new: JSON) -> list[JSON]:
    """Kueue's `SetStatusCondition`: the transition time moves only with the status."""
    old = next((cond for cond in conditions if cond["type"] == new["type"]), None)
    if old is not None and old["status"] == new["status"]:
        new = {
            **new,
            "lastTransitionTime": old.get("lastTransitionTime", new["lastTransitionTime"]),
        }
    return [cond for cond in conditions if cond["type"] != new["type"]] + [new]


def with_finished(workload: JSON, reason: str, message: str, now: datetime) -> JSON:
    new = copy.deepcopy(workload)
    status = new.setdefault("status", {})
    status["conditions"] = _set(
        _conditions(new), _condition(FINISHED, "True", reason, message, now)
    )
    return new


def without_reservation(workload: JSON, eviction: JSON, now: datetime) -> JSON:
    """The quota handed back after an eviction, once the pods are gone (Kueue's
    `SetRequeuedCondition` and `UnsetQuotaReservationWithCondition`)."""
    new = copy.deepcopy(workload)
    status = new.setdefault("status", {})
    conditions = _conditions(new)
    message = eviction.get("message", "")
    requeued = "True" if eviction.get("reason") in (PREEMPTED, NODE_FAILURES) else "False"
    conditions = _set(
        conditions, _condition(REQUEUED, requeued, eviction.get("reason", ""), message, now)
    )
    conditions = _set(
        conditions, _condition(QUOTA_RESERVED, "False", PENDING_EVALUATION, message, now)
    )
    if has(new, ADMITTED):
        conditions = _set(conditions, _condition(ADMITTED, "False", "NoReservation", message, now))
    status["conditions"] = conditions
    status.pop("admission", None)
    return new


def with_counts(workload: JSON, sizes: Mapping[str, int]) -> JSON:
    new = copy.deepcopy(workload)
    for pod_set in new["spec"]["podSets"]:
        pod_set["count"] = sizes[pod_set["name"]]
    return new


def _eviction(workload: JSON) -> JSON | None:
    return next(
        (
            cond
            for cond in _conditions(workload)
            if cond["type"] == EVICTED and cond["status"] == "True"
        ),
        None,
    )


def scaled_down(old: Mapping[str, int], new: Mapping[str, int]) -> bool:
    """Kueue's `ScaledDown`: some PodSet smaller, none larger."""
    return any(new[k] < old[k] for k in old) and not any(new[k] > old[k] for k in old)


def _admitted_counts(workload: JSON) -> dict[str, int]:
    sizes = counts(workload)
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        if assignment.get("count") is not None:
            sizes[assignment["name"]] = min(sizes[assignment["name"]], int(assignment["count"]))
    return sizes


def replica_counts(job: JSON, sizes: Mapping[str, int]) -> dict[str, int]:
    """The admitted PodSet counts as replica counts, by replica type."""
    return {t: sizes[pod_set_name(t)] for t in replica_types(job) if pod_set_name(t) in sizes}


# -- the pass --------------------------------------------------------------------------------


def step(job: JSON, queued_: Queued, *, now: datetime) -> Step:
    """What the integration writes for a labelled job now (an unlabelled one: nothing)."""
    if not queued(job) or (job.get("metadata") or {}).get("deletionTimestamp"):
        return Step()
    result = Step(update=released(queued_.workloads))
    workloads = [w for w in queued_.workloads if not w["metadata"].get("deletionTimestamp")]
    done = finished(job)
    if done is not None:
        for workload in workloads:
            if not has(workload, FINISHED):
                reason, message = done
                result.status.append(with_finished(workload, reason, message, now))
                result.events.append(
                    (
                        "Normal",
                        "FinishedWorkload",
                        f"Workload '{key(workload)}' is declared finished",
                    )
                )
        return result
    evicted = [w for w in workloads if not has(w, FINISHED) and has(w, EVICTED)]
    if evicted:
        return _evicted(job, result, evicted, now=now)
    current, pending = chain(workloads)
    if current is None:
        return _unadmitted(job, queued_, result, pending, now=now)
    return _admitted(job, queued_, result, current, pending, now=now)


def released(workloads: list[JSON]) -> list[JSON]:
    """Finished or deleted Workloads without Kueue's finalizer (one created by Kueue's built-in
    integration before the operator took over), as Kueue's job reconciler removes it."""
    result = []
    for workload in workloads:
        finalizers = workload["metadata"].get("finalizers") or []
        gone = has(workload, FINISHED) or workload["metadata"].get("deletionTimestamp")
        if FINALIZER in finalizers and gone:
            new = copy.deepcopy(workload)
            new["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
            result.append(new)
    return result


def _unadmitted(
    job: JSON, queued_: Queued, result: Step, workload: JSON | None, *, now: datetime
) -> Step:
    """No Workload holds quota: the job waits suspended with one Workload of its size."""
    sizes = wanted(job)
    if not suspended(job):
        result.job = stopped(job, workload)
        message = "Not admitted by cluster queue" if workload else "Waiting for a Kueue Workload"
        result.events.append(("Normal", "Stopped", message))
        return result
    if workload is None:
        result.create.append(desired_workload(job, queued_, sizes=sizes))
        name = workload_name(job)
        result.events.append(
            (
                "Normal",
                "CreatedWorkload",
                f"Created Workload: {job['metadata']['namespace']}/{name}",
            )
        )
    elif counts(workload) != sizes:
        result.update.append(with_counts(workload, sizes))
    result.admitted = {}
    return result


def _evicted(job: JSON, result: Step, evicted: list[JSON], *, now: datetime) -> Step:
    """Stop the job; once its pods are gone hand the quota back (Kueue requeues the Workload,
    which stays Evicted until it is admitted again: no new one is created meanwhile)."""
    if not suspended(job):
        result.job = stopped(job, evicted[-1])
        message = (_eviction(evicted[-1]) or {}).get("message", "Evicted")
        result.events.append(("Normal", "Stopped", message))
    elif not active(job):
        result.status += [
            without_reservation(w, _eviction(w) or {}, now) for w in evicted if reserved(w)
        ]
    result.admitted = {}
    return result


def _admitted(
    job: JSON,
    queued_: Queued,
    result: Step,
    current: JSON,
    pending: JSON | None,
    *,
    now: datetime,
) -> Step:
    sizes, held = wanted(job), _admitted_counts(current)
    if set(sizes) != set(held):  # replica types changed: Kueue starts over with a new Workload
        result.delete.append(current["metadata"]["name"])
        result.job = None if suspended(job) else stopped(job, current)
        result.admitted = {}
        return result
    if not is_admitted(current):  # quota reserved, admission checks pending
        result.admitted = {}
        return result
    if suspended(job):
        if missing := missing_flavors(current, queued_.flavors):
            result.events.append(
                ("Warning", "FlavorNotFound", f"ResourceFlavor {', '.join(missing)} not found")
            )
            result.admitted = {}
            return result
        result.job = started(job, current, queued_.flavors)
        queue = (current.get("status") or {}).get("admission", {}).get("clusterQueue", "")
        result.events.append(("Normal", "Started", f"Admitted by clusterQueue {queue}"))
        return result
    return _resized(job, queued_, result, current, pending)


def _resized(job: JSON, queued_: Queued, result: Step, current: JSON, pending: JSON | None) -> Step:
    """A running job whose spec asks for other counts than its Workload holds."""
    sizes, held = wanted(job), _admitted_counts(current)
    result.admitted = replica_counts(job, held)
    if sizes == held:
        if pending is not None:  # scaled back before the new slice was admitted
            result.delete.append(pending["metadata"]["name"])
        return result
    if not elastic(job):  # Kueue requeues a resized job: stop it, a new Workload follows
        result.job = stopped(job, current)
        result.delete.append(current["metadata"]["name"])
        result.events.append(
            ("Normal", "Stopped", "The job's pod counts differ from its Workload's")
        )
        return result
    if scaled_down(held, sizes):
        result.update.append(with_counts(current, sizes))
        result.admitted = replica_counts(job, sizes)
        if pending is not None:
            result.delete.append(pending["metadata"]["name"])
    elif pending is None:
        result.create.append(desired_workload(job, queued_, sizes=sizes, replaces=current))
    elif counts(pending) != sizes:
        result.update.append(with_counts(pending, sizes))
    return result
