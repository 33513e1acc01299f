"""One pass of the operator's own Kueue integration for PyTorchJob: the job and its Workloads read
into the writes to make, as a pure function.

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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from autoscaler.api.models import JSON
from autoscaler.controller.kueue import (
    EVICTED,
    FINISHED,
    admitted_counts,
    chain,
    counts,
    elastic,
    eviction,
    has,
    is_admitted,
    key,
    queued,
    reserved,
)
from autoscaler.controller.kueue_status import (
    released,
    with_counts,
    with_finished,
    without_reservation,
)
from autoscaler.controller.kueue_templates import missing_flavors, started, stopped, suspended
from autoscaler.controller.kueue_workload import (
    Queued,
    desired_workload,
    pod_set_name,
    replica_types,
    wanted,
    workload_name,
)


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
        message = (eviction(evicted[-1]) or {}).get("message", "Evicted")
        result.events.append(("Normal", "Stopped", message))
    elif not active(job):
        result.status += [
            without_reservation(w, eviction(w) or {}, now) for w in evicted if reserved(w)
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
    sizes, held = wanted(job), admitted_counts(current)
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
    sizes, held = wanted(job), admitted_counts(current)
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


def scaled_down(old: Mapping[str, int], new: Mapping[str, int]) -> bool:
    """Kueue's `ScaledDown`: some PodSet smaller, none larger."""
    return any(new[k] < old[k] for k in old) and not any(new[k] > old[k] for k in old)


def replica_counts(job: JSON, sizes: Mapping[str, int]) -> dict[str, int]:
    """The admitted PodSet counts as replica counts, by replica type."""
    return {t: sizes[pod_set_name(t)] for t in replica_types(job) if pod_set_name(t) in sizes}
