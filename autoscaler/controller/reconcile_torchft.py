"""The plan's torchft mode: the job's lighthouse and its Service kept alive, the workers of a
lighthouse that is gone restarted, and the `FaultTolerance` condition while the settings are
invalid.

What a lighthouse looks like is `torchft.py`'s; this module decides when to write it.
"""

from autoscaler.api import operator_annotations as oa
from autoscaler.api.models import JSON
from autoscaler.controller import conditions as cond
from autoscaler.controller import torchft
from autoscaler.controller.pods import is_terminating, phase
from autoscaler.controller.reconcile_pass import PlanningPass


def check_fault_tolerance(p: PlanningPass) -> bool:
    """A Warning and a False `FaultTolerance` condition while the torchft settings are
    invalid (True: invalid)."""
    mode = oa.FAULT_TOLERANCE
    return p.side_problem(torchft.problem(p.job), type_=mode.condition, reason=mode.reason)


def reconcile_lighthouse(p: PlanningPass) -> str | None:
    """Keep one live lighthouse and its Service; its uid, once it exists. A lighthouse that
    ended is deleted first and replaced when it is gone (the name is reused)."""
    if not any(torchft.is_lighthouse(svc) for svc in p.observed.services):
        p.result.create.append(torchft.desired_lighthouse_service(p.job))
    pods = [pod for pod in p.observed.pods if torchft.is_lighthouse(pod)]
    live = [q for q in pods if not is_terminating(q) and phase(q) in ("Pending", "Running")]
    for pod in pods:
        if pod not in live and not is_terminating(pod):
            name = pod["metadata"]["name"]
            message = f"torchft lighthouse {name} ended ({phase(pod)}): it is replaced"
            p.event("Warning", "TorchftLighthouseLost", message)
            p.delete(pod)
    if live:
        return str(live[0]["metadata"].get("uid") or "")
    if not pods:
        p.result.create.append(torchft.desired_lighthouse_pod(p.job))
    return None


def restart_detached_workers(
    p: PlanningPass, slots: dict[int, list[JSON]], *, lighthouse: str | None
) -> None:
    """Workers of a lighthouse that is gone are restarted: torchft cannot move them to a new
    one, so they resume from the job's checkpoint."""
    detached = [
        pod
        for pods in slots.values()
        for pod in pods
        if not is_terminating(pod) and torchft.lighthouse_uid(pod) != lighthouse
    ]
    for pod in detached:
        p.delete(pod)
    if detached:
        message = (
            f"PyTorchJob {p.job.name} is restarting {len(detached)} worker(s): their "
            "torchft lighthouse was lost."
        )
        p.event("Warning", cond.reason("Restarting"), message)
        p.condition(cond.RESTARTING, "True", "Restarting", message)
