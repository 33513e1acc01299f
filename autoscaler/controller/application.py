"""Applying a reconcile plan: its creates, deletes, updates, status write and Events, through
the API server and written through to the caches (kopf's `actions/application.py`).

Writes are idempotent: names are deterministic, so a create that already happened is a 409 and
a delete that did is a 404.
"""

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import datetime
from typing import Any

from autoscaler.clients.informer import Informer
from autoscaler.clients.kube import (
    BY_KIND,
    JOBS,
    ConflictError,
    Kube,
    NamespaceTerminatingError,
    NotFoundError,
    Resource,
)
from autoscaler.clients.recorder import EventRecorder
from autoscaler.controller.counting import (
    CREATED_COUNTERS,
    DELETED_COUNTERS,
    FAILED_CREATE_COUNTERS,
    count_job,
    count_object,
)
from autoscaler.controller.expectations import Expectations, ObjectRef
from autoscaler.controller.gang import PODGROUP_KIND, GangScheduler
from autoscaler.controller.keys import JobKey
from autoscaler.controller.reconcile_pass import Observed, Plan
from autoscaler.observability.events import job_event
from autoscaler.observability.metrics import OperatorMetrics

JSON = dict[str, Any]
Replan = Callable[[JSON, Observed], Plan]  # plans a job again, on a conflicting status write
# How an Event message names a kind ("Created pod: x"); upstream writes "Deleted PodGroup: x".
EVENT_NOUNS = {PODGROUP_KIND: "PodGroup"}


def podgroup_resource(gang: GangScheduler) -> Resource:
    """Where the gang scheduler's PodGroups live."""
    return Resource(gang.api.group, gang.api.version, gang.api.plural)


class Application:
    """Writes plans through `kube`; `caches` (the runner's, by kind) and `jobs` are written
    through so the next pass sees the writes before the watch does."""

    def __init__(
        self,
        kube: Kube,
        *,
        caches: Mapping[str, Informer],
        jobs: Informer,
        events: EventRecorder,
        metrics: OperatorMetrics,
        expectations: Expectations,
        clock: Callable[[], datetime],
        gang: GangScheduler | None,
        replan: Replan,
        once_events_remembered: int,
    ) -> None:
        self.kube, self.caches, self.jobs, self.events = kube, caches, jobs, events
        self.metrics, self.expectations, self.clock = metrics, expectations, clock
        self.podgroups = podgroup_resource(gang) if gang is not None else None
        self.replan, self.once_events_remembered = replan, once_events_remembered
        self._sent_once: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def apply(self, job: JSON, result: Plan, *, observed: Observed) -> None:
        """Every write of the plan; a failed one is reported and retried, the rest still done."""
        self.expectations.expect(_key(job), result)
        failures = [error for obj in result.create if (error := self._create(job, obj))]
        for kind, name in result.delete:
            if error := self._delete(job, kind, name):
                failures.append(error)
        for obj in result.update:  # a conflict retries the whole pass from fresh caches
            written = self.kube.replace(obj, resource=self._resource(obj["kind"]))
            self.caches[obj["kind"]].apply("MODIFIED", written)
        for event in result.events:
            if self._first_time(event.once):
                self.record(job, event.type, event.reason, event.message)
        if result.status is not None:
            self._write_status(job, result.status, observed=observed)
        for counted in result.lifecycle:
            count_job(self.metrics, job, counted)
        for uid in result.failed_pods:
            if self._first_time(f"failed-pod/{uid}"):
                self.metrics.objects["failed_pods"].inc()
        if result.delete_job:
            with suppress(NotFoundError):
                self.kube.delete(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
                count_job(self.metrics, job, "deleted")
        if failures:
            raise failures[0]

    def record(self, job: JSON, type_: str, reason: str, message: str) -> None:
        """An Event about the job, sent off the reconcile path."""
        self.events.record(
            job_event(job, type_=type_, reason=reason, message=message, now=self.clock())
        )

    def _create(self, job: JSON, obj: JSON) -> Exception | None:
        kind, name = obj["kind"], obj["metadata"]["name"]
        try:
            created = self.kube.create(obj, resource=self._resource(kind))
        except ConflictError:
            return None  # already there (a stale cache): names are deterministic
        except NamespaceTerminatingError:
            # As Kubernetes' own controllers do: the namespace's objects, this job included, are
            # about to be deleted, so nothing to retry or report. Retrying with a Warning each
            # time flooded the Event queue of every other job while a namespace took its time.
            self._failed_create(job, (kind, name))
            return None
        except Exception as error:  # e.g. a template the pod API rejects: tell the user
            self._failed_create(job, (kind, name))
            self.record(job, "Warning", f"FailedCreate{kind}", f"Error creating: {_reason(error)}")
            return error
        count_object(self.metrics, CREATED_COUNTERS, kind)
        self.caches[kind].apply("ADDED", created)
        self.record(job, "Normal", f"SuccessfulCreate{kind}", f"Created {_noun(kind)}: {name}")
        return None

    def _failed_create(self, job: JSON, ref: ObjectRef) -> None:
        self.expectations.never_coming(_key(job), ref)
        count_object(self.metrics, FAILED_CREATE_COUNTERS, ref[0])

    def _delete(self, job: JSON, kind: str, name: str) -> Exception | None:
        try:
            self.kube.delete(self._resource(kind), job["metadata"]["namespace"], name)
        except NotFoundError:
            return None
        except Exception as error:
            self.expectations.never_coming(_key(job), (kind, name))
            self.record(
                job, "Warning", f"FailedDelete{kind}", f"Error deleting {name}: {_reason(error)}"
            )
            return error
        count_object(self.metrics, DELETED_COUNTERS, kind)
        self.record(job, "Normal", f"SuccessfulDelete{kind}", f"Deleted {_noun(kind)}: {name}")
        return None

    def _first_time(self, once: str | None) -> bool:
        """False for an Event already sent under the same key (kept for the latest keys)."""
        if once is None:
            return True
        with self._lock:
            if once in self._sent_once:
                self._sent_once.move_to_end(once)
                return False
            self._sent_once[once] = None
            if len(self._sent_once) > self.once_events_remembered:
                self._sent_once.popitem(last=False)
            return True

    def _resource(self, kind: str) -> Resource:
        """Where objects of `kind` live; a PodGroup's group is the gang scheduler's."""
        if kind == PODGROUP_KIND and self.podgroups is not None:
            return self.podgroups
        return BY_KIND[kind]

    def _write_status(self, job: JSON, status: JSON, *, observed: Observed) -> None:
        """PUT /status; on a conflict, re-plan once from a fresh read of the job."""
        try:
            written = self.kube.replace({**job, "status": status}, sub="status")
        except NotFoundError:
            return  # deleted meanwhile: there is no status left to write
        except ConflictError:
            fresh = self.kube.get(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
            replanned = self.replan(fresh, observed)
            if replanned.status is None:
                return
            written = self.kube.replace({**fresh, "status": replanned.status}, sub="status")
        # Write-through: the next pass must see the new status even before the watch does,
        # or it would act on the old one (e.g. recreate the pods a failure just removed).
        self.jobs.apply("MODIFIED", written)


def _key(job: JSON) -> JobKey:
    return job["metadata"]["namespace"], job["metadata"]["name"]


def _noun(kind: str) -> str:
    return EVENT_NOUNS.get(kind, kind.lower())


def _reason(error: Exception) -> str:
    """The API server's message for a rejected write, else the error itself."""
    body = getattr(getattr(error, "__cause__", None), "body", None) or getattr(error, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message", body))
        except ValueError:
            return str(body)
    return str(error)
