"""What one reconcile pass reads and writes, and the working state its steps share.

`Observed` is what the runner found for a job, `Plan` the writes it should make; a
`PlanningPass` carries the job, the injected clock, the status being built and the plan being
filled through the core planner (`reconcile.py`) and the features beside it (`reconcile_*.py`).
Nothing here does I/O or reads the clock.
"""

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller import conditions as cond
from autoscaler.controller import rendezvous, torchft
from autoscaler.controller.builders import PodSettings
from autoscaler.controller.gang import GangScheduler
from autoscaler.controller.pods import is_terminating
from autoscaler.controller.status import count_replicas


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    # Set for an Event about a fact that stays visible pass after pass (a terminated container):
    # the runner sends it once per key, as client-go's event correlator folds repeats into one.
    once: str | None = None


@dataclass(frozen=True)
class Observed:
    """The job's pods and services (controlled by it), and the HPA named like it, if any.

    With gang scheduling: the PodGroup named like the job, whether the API server serves
    PodGroups at all, and the value of each PriorityClass (for the group's minResources).
    """

    pods: list[JSON] = field(default_factory=list)
    services: list[JSON] = field(default_factory=list)
    hpa: JSON | None = None
    podgroup: JSON | None = None
    podgroup_api_missing: bool = False
    priorities: Mapping[str, int] = field(default_factory=dict)
    # Under the Kueue integration: the Worker count of a scale-up Kueue has not admitted yet.
    queued_workers: int | None = None


@dataclass
class Plan:
    create: list[JSON] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    update: list[JSON] = field(default_factory=list)
    status: JSON | None = None  # the new status, only when it changed
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    # What upstream's job counters count in this pass: "created", "successful", "failed" when
    # that condition becomes true, "restarted" per restart; "deleted" is the runner's, on
    # `delete_job` done.
    lifecycle: list[str] = field(default_factory=list)
    # The Failed pods this pass saw (uids), for upstream's `failed_pods_total`: the runner counts
    # each pod once, where upstream counts it again on every pass until it is gone.
    failed_pods: list[str] = field(default_factory=list)

    @property
    def writes(self) -> int:
        changes = len(self.create) + len(self.delete) + len(self.update) + len(self.events)
        return changes + (self.status is not None) + self.delete_job


class PlanningPass:
    """One pass over a defaulted job: its status as it is being rewritten, and its plan."""

    def __init__(
        self,
        job: PyTorchJob,
        observed: Observed,
        *,
        now: datetime,
        status: JSON,
        settings: PodSettings,
        gang: GangScheduler | None,
    ) -> None:
        self.job, self.observed, self.now = job, observed, now
        self.settings, self.gang = settings, gang
        self.fault_tolerant = torchft.requested(job)
        self.own_store = rendezvous.requested(job)
        self.old_status = status
        self.status: dict[str, Any] = copy.deepcopy(status)
        self.status["conditions"] = list(self.status.get("conditions") or [])
        self.result = Plan()

    def condition(self, type_: str, status: str, reason_suffix: str, message: str) -> None:
        new = cond.Condition(
            type=type_, status=status, reason=cond.reason(reason_suffix), message=message
        )
        self.status["conditions"] = cond.set_condition(self.status["conditions"], new, now=self.now)

    def side_condition(self, new: cond.Condition | None, *, type_: str) -> bool:
        """Set (None: remove) the side condition `type_`; True when the conditions changed."""
        before = self.status["conditions"]
        self.status["conditions"] = cond.set_side_condition(before, new, now=self.now, type_=type_)
        return bool(self.status["conditions"] != before)

    def side_problem(self, problem: str | None, *, type_: str, reason: str) -> bool:
        """The side condition `type_` False with `reason` while `problem` stands, a Warning when
        it first does (True: it stands)."""
        new = None
        if problem is not None:
            message = f"{problem}; no pods are created until it is fixed"
            new = cond.Condition(type=type_, status="False", reason=reason, message=message)
        if self.side_condition(new, type_=type_) and new is not None:
            self.event("Warning", new.reason, new.message)
        return problem is not None

    def event(self, type_: str, reason: str, message: str, once: str | None = None) -> None:
        self.result.events.append(Event(type=type_, reason=reason, message=message, once=once))

    def delete(self, pod: JSON) -> None:
        if not is_terminating(pod):
            self.remove("Pod", pod["metadata"]["name"])

    def counts_of(self, helper: Callable[[JSON], bool]) -> JSON:
        """The `status.replicaStatuses` entry of the helper pods `helper` picks (the lighthouse,
        the rendezvous store)."""
        return count_replicas([pod for pod in self.observed.pods if helper(pod)])

    def delete_helper(self, helper: Callable[[JSON], bool]) -> None:
        """Every pod and Service `helper` picks: a job's helper goes with the job."""
        for pod in self.observed.pods:
            if helper(pod):
                self.delete(pod)
        for svc in self.observed.services:
            if helper(svc):
                self.remove("Service", svc["metadata"]["name"])

    def remove(self, kind: str, name: str) -> None:
        """Plan one delete of the object, however many rules ask for it (a lighthouse is both
        a Running pod for cleanPodPolicy and a lighthouse to remove)."""
        if (kind, name) not in self.result.delete:
            self.result.delete.append((kind, name))
