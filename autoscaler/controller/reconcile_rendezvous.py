"""The plan's own rendezvous store: one live store pod and its Service for a job that asks for
one, replaced when it ends, and the `Rendezvous` condition while the annotation cannot be run.

What a store looks like is `rendezvous.py`'s; this module decides when to write it.
"""

from autoscaler.api import operator_annotations as oa
from autoscaler.controller import rendezvous
from autoscaler.controller.pods import is_terminating, phase
from autoscaler.controller.reconcile_pass import PlanningPass


def check_rendezvous(p: PlanningPass) -> bool:
    """A Warning and a False `Rendezvous` condition while the rendezvous store annotation
    cannot be run (True: it cannot)."""
    problem = rendezvous.problem(p.job)
    if problem is None and p.own_store and p.fault_tolerant:
        problem = f"{rendezvous.ANNOTATION} is for torchrun: a torchft job has no rendezvous"
    return p.side_problem(problem, type_=oa.RENDEZVOUS.condition, reason=oa.RENDEZVOUS.reason)


def reconcile_store(p: PlanningPass) -> None:
    """Keep one live rendezvous store and its Service. A store that ended is deleted first
    and replaced when it is gone (the name is reused); the agents' failed rendezvous
    restarts them, and they join the new one."""
    if not any(rendezvous.is_store(svc) for svc in p.observed.services):
        p.result.create.append(rendezvous.desired_store_service(p.job))
    pods = [pod for pod in p.observed.pods if rendezvous.is_store(pod)]
    live = [q for q in pods if not is_terminating(q) and phase(q) in ("Pending", "Running")]
    for pod in pods:
        if pod not in live and not is_terminating(pod):
            name = pod["metadata"]["name"]
            message = f"rendezvous store {name} ended ({phase(pod)}): it is replaced"
            p.event("Warning", "RendezvousStoreLost", message)
            p.delete(pod)
    if not pods:
        p.result.create.append(rendezvous.desired_store_pod(p.job))
