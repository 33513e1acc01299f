"""The runner's side of the Kueue integration: reads Kueue's caches into a step, writes the
step through the API server, and removes a deleted job's Workloads."""

import dataclasses
import threading
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.clients.informer import Informer, ObjectKey
from autoscaler.clients.kube import WORKLOADS, ConflictError, Kube, NotFoundError
from autoscaler.controller import kueue, kueue_step, kueue_workload
from autoscaler.controller.reconcile_pass import Observed

JSON = dict[str, Any]
Record = Callable[[JSON, str, str, str], None]  # (job, type, reason, message): one Event


@dataclasses.dataclass(frozen=True)
class KueueCaches:
    """Kueue's objects as cached once its CRDs are served."""

    workloads: Informer
    flavors: Informer
    workload_priorities: Informer


class KueueRuntime:
    """One labelled job's Kueue writes per pass while `enabled` (the operator's `--kueue`, read
    at each pass: tests turn it on for a running operator); `caches` is None until Kueue is
    served."""

    def __init__(
        self,
        kube: Kube,
        *,
        enabled: Callable[[], bool],
        jobs: Informer,
        record: Record,
        priorities: Callable[[], dict[str, int]],
        clock: Callable[[], datetime],
    ) -> None:
        self.kube, self.enabled, self.jobs, self.record = kube, enabled, jobs, record
        self.priorities, self.clock = priorities, clock
        self.caches: KueueCaches | None = None
        self._gone: dict[ObjectKey, str] = {}  # deleted jobs' uids, until their Workloads go
        self._lock = threading.Lock()

    def job_deleted(self, key: ObjectKey, job: JSON) -> None:
        """Remember a deleted labelled job's uid: its next pass removes its Workloads."""
        if self.enabled() and kueue.queued(job):
            with self._lock:
                self._gone[key] = job["metadata"].get("uid", "")

    def admit(self, job: JSON) -> tuple[bool, dict[str, int] | None]:
        """The Kueue integration's writes for a labelled job. Returns whether the pass goes on
        (not when the job's spec changed, or Kueue's objects are not cached yet) and the
        admitted replica counts (None: no limit)."""
        if not self.enabled() or not kueue.queued(job):
            return True, None
        if self.caches is None:
            return False, None
        uid = job["metadata"].get("uid", "")
        queued = kueue_workload.Queued(
            workloads=self.caches.workloads.indexed(uid),
            flavors={f["metadata"]["name"]: f for f in self.caches.flavors.items()},
            priorities=self.priorities(),
            workload_priorities={
                w["metadata"]["name"]: int(w.get("value") or 0)
                for w in self.caches.workload_priorities.items()
            },
        )
        step = kueue_step.step(job, queued, now=self.clock())
        self._apply(job, step, self.caches.workloads)
        return not step.holds, step.admitted

    def _apply(self, job: JSON, step: kueue_step.Step, workloads: Informer) -> None:
        namespace = job["metadata"]["namespace"]
        if step.job is not None:  # first: a conflict retries the pass from fresh caches
            self.jobs.apply("MODIFIED", self.kube.replace(step.job))
        for workload in step.create:
            with suppress(ConflictError):  # names are deterministic: created by an earlier pass
                workloads.apply("ADDED", self.kube.create(workload, resource=WORKLOADS))
        for workload in step.update:
            workloads.apply("MODIFIED", self.kube.replace(workload, resource=WORKLOADS))
        for workload in step.status:
            written = self.kube.replace(workload, sub="status", resource=WORKLOADS)
            workloads.apply("MODIFIED", written)
        for name in step.delete:
            with suppress(NotFoundError):
                self.kube.delete(WORKLOADS, namespace, name)
        for type_, reason, message in step.events:
            self.record(job, type_, reason, message)

    def delete_workloads_of_gone(self, key: ObjectKey) -> None:
        """The Workloads of a deleted job (the garbage collector would too, where it runs)."""
        with self._lock:
            uid = self._gone.pop(key, None)
        if uid is None or self.caches is None:
            return
        for workload in self.caches.workloads.indexed(uid):
            with suppress(NotFoundError):
                self.kube.delete(WORKLOADS, key[0], workload["metadata"]["name"])
            finalizers = workload["metadata"].get("finalizers") or []
            if kueue.FINALIZER in finalizers:  # Kueue's, on a Workload taken over from it
                kept = [f for f in finalizers if f != kueue.FINALIZER]
                with suppress(NotFoundError):
                    patch = {"metadata": {"finalizers": kept}}
                    name = workload["metadata"]["name"]
                    self.kube.merge_patch(WORKLOADS, key[0], name, patch)


def with_queued_workers(observed: Observed, job: JSON, admitted: dict[str, int] | None) -> Observed:
    """The Worker count waiting for Kueue's admission, when the spec asks for more."""
    if not admitted:  # none admitted: the whole job waits, suspended
        return observed
    spec = job["spec"]["pytorchReplicaSpecs"].get(c.WORKER) or {}
    wanted = int(spec.get("replicas", 1))
    if wanted <= admitted.get(c.WORKER, 0):
        return observed
    return dataclasses.replace(observed, queued_workers=wanted)


def kueue_capped(job: JSON, admitted: dict[str, int]) -> JSON:
    """The job as the pod planner should see it: no more replicas of a type than admitted."""
    specs = {
        name: {**spec, "replicas": min(int(spec.get("replicas", 1)), admitted.get(name, 0))}
        for name, spec in job["spec"]["pytorchReplicaSpecs"].items()
    }
    return {**job, "spec": {**job["spec"], "pytorchReplicaSpecs": specs}}
