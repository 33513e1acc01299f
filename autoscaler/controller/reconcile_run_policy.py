"""The plan's `runPolicy`: suspend and resume, failing past `backoffLimit` or
`activeDeadlineSeconds`, and a finished job's cleanup by `cleanPodPolicy` and deletion after
`ttlSecondsAfterFinished`."""

from datetime import timedelta

from autoscaler.api.models import JSON
from autoscaler.api.timestamps import format_timestamp, parse_timestamp
from autoscaler.controller import conditions as cond
from autoscaler.controller import rendezvous, torchft
from autoscaler.controller.pods import phase, replica_type_of, restart_count
from autoscaler.controller.reconcile_gang import delete_podgroup
from autoscaler.controller.reconcile_pass import PlanningPass


def finish(p: PlanningPass) -> None:
    policy = p.job.spec.run_policy.clean_pod_policy
    if policy == "All":
        _delete_everything(p)
    elif policy == "Running":
        for pod in p.observed.pods:
            if phase(pod) in ("Running", "Pending"):
                _delete_pod_and_service(p, pod)
    p.delete_helper(torchft.is_lighthouse)  # whatever cleanPodPolicy says: it would run forever
    p.delete_helper(rendezvous.is_store)  # likewise
    delete_podgroup(p)
    if cond.has_condition(p.status["conditions"], cond.SUCCEEDED):
        for counts in (p.status.get("replicaStatuses") or {}).values():
            counts["succeeded"] = counts.get("succeeded", 0) + counts.pop("active", 0)
    _expire_after_ttl(p)


def _expire_after_ttl(p: PlanningPass) -> None:
    ttl = p.job.spec.run_policy.ttl_seconds_after_finished
    completed = p.status.get("completionTime")
    if ttl is None or completed is None:
        return
    remaining = (parse_timestamp(completed) + timedelta(seconds=ttl) - p.now).total_seconds()
    if remaining <= 0:
        p.result.delete_job = True
    else:
        p.result.requeue_after = remaining


def suspend(p: PlanningPass) -> None:
    _delete_everything(p)
    delete_podgroup(p)
    for counts in (p.status.get("replicaStatuses") or {}).values():
        counts.pop("active", None)
    message = f"PyTorchJob {p.job.name} is suspended."
    if cond.has_condition(p.status["conditions"], cond.RUNNING):
        p.condition(cond.RUNNING, "False", "Suspended", message)
    if not cond.has_condition(p.status["conditions"], cond.SUSPENDED):
        p.condition(cond.SUSPENDED, "True", "Suspended", message)
        p.event("Normal", cond.reason("Suspended"), message)


def resume_if_suspended(p: PlanningPass) -> None:
    if cond.has_condition(p.status["conditions"], cond.SUSPENDED):
        message = f"PyTorchJob {p.job.name} is resumed."
        p.condition(cond.SUSPENDED, "False", "Resumed", message)
        p.event("Normal", cond.reason("Resumed"), message)
        p.status["startTime"] = format_timestamp(p.now)


def past_limits(p: PlanningPass) -> str | None:
    """Why the job must fail now (backoff limit or deadline), else None."""
    policy = p.job.spec.run_policy
    if policy.backoff_limit is not None and _past_backoff_limit(p, policy.backoff_limit):
        return "it has reached the specified backoff limit"
    deadline, started = policy.active_deadline_seconds, p.status.get("startTime")
    if deadline is not None and started is not None:
        remaining = deadline - (p.now - parse_timestamp(started)).total_seconds()
        if remaining <= 0:
            return "it was active longer than specified deadline"
        p.result.requeue_after = remaining
    return None


def _past_backoff_limit(p: PlanningPass, limit: int) -> bool:
    restarting = {
        name
        for name, spec in p.job.spec.pytorch_replica_specs.items()
        if spec.restart_policy != "Never"
    }
    pods = [pod for pod in p.observed.pods if replica_type_of(pod) in restarting]
    restarts = sum(restart_count(pod) for pod in pods if phase(pod) == "Running")
    if restarts >= limit if limit > 0 else restarts > 0:
        return True
    # New whole-pod failures count only against a limit of 0 (upstream's requeue counter).
    failed_now = sum(phase(pod) == "Failed" for pod in p.observed.pods)
    failed_before = sum(
        s.get("failed", 0) for s in (p.status.get("replicaStatuses") or {}).values()
    )
    return limit == 0 and failed_now > failed_before


def fail_job(p: PlanningPass, why: str) -> None:
    """Failed first, then cleaned up as a finished job, so `cleanPodPolicy` holds (upstream
    v1.9.4; v1.9.3 deleted every pod whatever the policy)."""
    p.status.setdefault("completionTime", format_timestamp(p.now))
    message = f"Job {p.job.name} has failed because {why}"
    p.condition(cond.FAILED, "True", "Failed", message)
    p.event("Normal", cond.reason("Failed"), message)
    finish(p)


def _delete_everything(p: PlanningPass) -> None:
    """Every pod and every service of the job (suspend, failure, cleanPodPolicy All)."""
    for pod in p.observed.pods:
        p.delete(pod)
    for svc in p.observed.services:
        p.remove("Service", svc["metadata"]["name"])


def _delete_pod_and_service(p: PlanningPass, pod: JSON) -> None:
    p.delete(pod)
    name = pod["metadata"]["name"]
    if any(svc["metadata"]["name"] == name for svc in p.observed.services):
        p.remove("Service", name)
