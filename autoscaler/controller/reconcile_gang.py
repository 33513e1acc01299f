"""The plan's gang scheduling (upstream `SyncPodGroup` and the Volcano gate): the job's
PodGroup, the `GangScheduled` condition, and the pods held back until the group allows them.

What a PodGroup and a gang pod look like is `gang.py`'s; this module decides when to write
them within a pass.
"""

from autoscaler.controller import conditions as cond
from autoscaler.controller.gang import (
    CUSTOM_SCHEDULER_MESSAGE,
    PODGROUP_KIND,
    GangScheduler,
    bound_pods,
    custom_scheduler_set,
    desired_podgroup,
    min_member,
    pods_may_start,
)
from autoscaler.controller.reconcile_pass import PlanningPass


def forget_gang_condition(p: PlanningPass) -> None:
    """Without gang scheduling: drop the condition an earlier run with it left."""
    p.side_condition(None, type_=cond.GANG_CONDITION)


def reconcile_podgroup(p: PlanningPass, gang: GangScheduler) -> bool:
    """Create or update the job's PodGroup; True when the job's pods may be reconciled."""
    if p.observed.podgroup_api_missing:
        api = gang.api
        message = (
            f"--gang-scheduler-name={gang.name} needs the PodGroup CRD of "
            f"{api.api_version}, which the API server does not serve: install it, or run "
            "the operator without the flag. No pods are created until then."
        )
        _gang_condition(p, "False", "PodGroupCRDMissing", message, warn=True)
        return False
    current = p.observed.podgroup
    desired = desired_podgroup(p.job, gang, priorities=p.observed.priorities, current=current)
    if current is None:
        p.result.create.append(desired)
    elif desired["spec"] != current.get("spec"):
        p.result.update.append({**current, "spec": desired["spec"]})
    if pods_may_start(gang, current):
        return True
    phase = ((current or {}).get("status") or {}).get("phase") or "unset"
    message = (
        f"PodGroup {p.job.name} is not admitted by Volcano yet (phase {phase}): "
        "the job's pods are created once it is"
    )
    _gang_condition(p, "False", "PodGroupPending", message)
    return False


def report_gang_placement(p: PlanningPass) -> None:
    """True once a scheduler placed the gang's minimum (pods bound to nodes)."""
    members, bound = min_member(p.job), bound_pods(p.observed.pods)
    placed = f"{bound} of the job's pods placed; its gang needs {members}"
    if bound >= members:
        _gang_condition(p, "True", "GangScheduled", placed)
    else:
        _gang_condition(p, "False", "GangPending", f"{placed}: waiting for the scheduler")


def warn_custom_scheduler(p: PlanningPass, gang: GangScheduler) -> None:
    """A Warning with each pod created while the template names a scheduler of its own."""
    if custom_scheduler_set(p.job, gang):
        p.event("Warning", "SetPodTemplateSchedulerName", CUSTOM_SCHEDULER_MESSAGE)


def delete_podgroup(p: PlanningPass) -> None:
    """Upstream deletes the PodGroup when the job finishes, fails or is suspended."""
    if p.gang is not None and p.observed.podgroup is not None:
        p.event("Normal", "JobTerminated", "Job has been terminated. Deleting PodGroup")
        p.result.delete.append((PODGROUP_KIND, p.job.name))


def _gang_condition(
    p: PlanningPass, status: str, reason: str, message: str, *, warn: bool = False
) -> None:
    new = cond.Condition(type=cond.GANG_CONDITION, status=status, reason=reason, message=message)
    if p.side_condition(new, type_=cond.GANG_CONDITION) and warn:
        p.event("Warning", reason, message)
