"""The plan's HorizontalPodAutoscaler: owned by the job, made from `elasticPolicy.metrics`,
removed with them or while the job is suspended, and left alone when someone else owns it."""

from autoscaler.api.models import JSON
from autoscaler.controller import conditions as cond
from autoscaler.controller.builders import desired_hpa
from autoscaler.controller.reconcile_pass import PlanningPass
from autoscaler.controller.status import by_value, is_subset

HPA_KIND = "HorizontalPodAutoscaler"


def reconcile_hpa(p: PlanningPass) -> None:
    """Create, update or delete the job's HPA so it matches the job's metrics."""
    desired = None if p.job.spec.run_policy.suspend else desired_hpa(p.job)
    current = p.observed.hpa
    if current is not None and not _owned_by_job(p, current):
        if desired is not None:
            _hpa_not_owned(p)
        return
    p.side_condition(None, type_=cond.HPA_CONDITION)
    if desired is None:
        if current is not None:
            p.result.delete.append((HPA_KIND, p.job.name))
    elif current is None:
        p.result.create.append(desired)
    elif not is_subset(by_value(desired["spec"]), by_value(current.get("spec") or {})):
        resource_version = current["metadata"].get("resourceVersion")
        desired["metadata"]["resourceVersion"] = resource_version
        p.result.update.append(desired)


def _hpa_not_owned(p: PlanningPass) -> None:
    message = (
        f"HorizontalPodAutoscaler {p.job.name} exists and is not owned by this job: "
        "it is left alone, so elasticPolicy.metrics are not applied"
    )
    new = cond.Condition(
        type=cond.HPA_CONDITION, status="False", reason="HPANotOwned", message=message
    )
    if p.side_condition(new, type_=cond.HPA_CONDITION):
        p.event("Warning", "HPANotOwned", message)


def _owned_by_job(p: PlanningPass, obj: JSON) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == p.job.metadata.uid for ref in refs)
