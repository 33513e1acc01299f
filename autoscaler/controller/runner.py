"""The operator loop: informers feed a work queue keyed by job; workers apply reconcile plans.

Everything decided is decided by `reconcile.plan` (pure); this module only reads caches, writes
through `autoscaler.clients`, retries, and measures. Writes are idempotent: names are
deterministic, so a create that already happened is a 409 and a delete that did is a 404.
"""

import dataclasses
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from autoscaler.api import coordinates as c
from autoscaler.api.errors import first_error
from autoscaler.clients.informer import Informer, ObjectKey
from autoscaler.clients.kube import (
    BY_KIND,
    HPAS,
    JOBS,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    SERVICES,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    ConflictError,
    Kube,
    NamespaceTerminatingError,
    NotFoundError,
    Resource,
)
from autoscaler.clients.recorder import EventRecorder
from autoscaler.controller import kueue
from autoscaler.controller.builders import UPSTREAM_DEFAULTS, PodSettings
from autoscaler.controller.claims import adoption_patch, claims, controller_uid, release_patch
from autoscaler.controller.gang import PODGROUP_KIND, GangScheduler, gang_scheduler
from autoscaler.controller.naming import controller_reference, selector
from autoscaler.controller.reconcile import Observed, Plan, plan
from autoscaler.controller.workqueue import ShutDownError, WorkQueue
from autoscaler.observability.events import job_event
from autoscaler.observability.metrics import OperatorMetrics, operator_metrics

JSON = dict[str, Any]
log = logging.getLogger(__name__)
OWNED_SELECTOR = selector({c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME})
INVALID = 422  # the API server's status for a write it finds invalid
EXPECTATION_TIMEOUT = 30.0  # after this, stop waiting for the watch to show our own writes


FRAMEWORK = "pytorch"  # the `framework` label of upstream's job counters
# Upstream's object counters, by the kind written: where upstream counts them (a service whose
# create failed counts too; a create that found the object already there counts neither way).
CREATED_COUNTERS = {
    "Pod": "created_pods",
    "Service": "succeeded_service_creation",
    PODGROUP_KIND: "created_pod_groups",
}
FAILED_CREATE_COUNTERS = {"Service": "failed_service_creation"}
DELETED_COUNTERS = {PODGROUP_KIND: "deleted_pod_groups"}
# How an Event message names a kind ("Created pod: x"); upstream writes "Deleted PodGroup: x".
EVENT_NOUNS = {PODGROUP_KIND: "PodGroup"}


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    workers: int = 4
    resync_seconds: float = 300.0
    watch_timeout: int = 60
    namespace: str | None = None  # only this namespace's jobs (upstream's `--namespace`)
    pods: PodSettings = UPSTREAM_DEFAULTS
    once_events_remembered: int = 10_000  # keys of Events sent once (a few MB at most)
    gang_scheduler_name: str = ""  # --gang-scheduler-name: volcano, or a scheduler-plugins name
    # --kueue: the operator's own Kueue integration (Kueue's built-in one for PyTorchJob off).
    kueue: bool = False


@dataclass
class _Expectation:
    """Writes the caches must show before the job is planned again (client-go expectations)."""

    created: set[tuple[str, str]] = field(default_factory=set)
    deleted: set[tuple[str, str]] = field(default_factory=set)
    deadline: float = 0.0


def owning_job_key(obj: JSON) -> ObjectKey | None:
    """The job that controls `obj` (a PodGroup), from its controller owner reference."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == c.KIND:
            return obj["metadata"].get("namespace", ""), ref.get("name", "")
    return None


def job_key_of(obj: JSON) -> ObjectKey:
    """The job an owned pod or service belongs to, from its job-name label."""
    labels = obj["metadata"].get("labels") or {}
    return obj["metadata"].get("namespace", ""), labels.get(c.LABEL_JOB_NAME, "")


def owned_keys(obj: JSON) -> list[Any]:
    """A pod's or service's index keys: its job by label, and its controller by uid (which
    finds the job's own whose labels no longer match, to release them)."""
    uid = controller_uid(obj)
    return [job_key_of(obj)] + ([("owner", uid)] if uid is not None else [])


class AdoptionError(Exception):
    """The job cannot adopt now (upstream's `CanAdopt`): the pass is retried."""


class Operator:
    def __init__(
        self,
        kube: Kube,
        *,
        config: OperatorConfig = OperatorConfig(),
        metrics: OperatorMetrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` is the wall clock the planner and the Events read; `monotonic` times how long
        a job waits for the caches to show the operator's own writes (EXPECTATION_TIMEOUT).
        Both are parameters so that tests move time instead of sleeping."""
        self.kube, self.config, self.clock, self.monotonic = kube, config, clock, monotonic
        self.metrics = metrics or operator_metrics()
        self._counted, self._counted_lock = (0, 0), threading.Lock()
        self.queue = WorkQueue(metrics=self.metrics.runtime.queue)
        self.events = EventRecorder(kube)
        self._expectations: dict[ObjectKey, _Expectation] = {}
        self._lock = threading.Lock()
        timeout = config.watch_timeout
        scope = config.namespace
        self.jobs = Informer(
            kube, JOBS, namespace=scope, on_event=self._on_job, watch_timeout=timeout
        )

        def owned(resource: Resource, on_event: Callable[[str, JSON], None]) -> Informer:
            return Informer(
                kube,
                resource,
                namespace=scope,
                on_event=on_event,
                selector=OWNED_SELECTOR,
                index=owned_keys,
                watch_timeout=timeout,
            )

        self.pods = owned(PODS, self._on_pod)
        self.services = owned(SERVICES, self._on_owned)
        self.hpas = Informer(
            kube, HPAS, namespace=scope, on_event=self._on_owned_hpa, watch_timeout=timeout
        )
        self._sent_once: OrderedDict[str, None] = OrderedDict()
        self.informers = [self.jobs, self.pods, self.services, self.hpas]
        self._rejected: dict[ObjectKey, Any] = {}
        self._caches = {
            "Pod": self.pods,
            "Service": self.services,
            "HorizontalPodAutoscaler": self.hpas,
        }
        self._threads: list[threading.Thread] = []
        self.gang: GangScheduler | None = gang_scheduler(config.gang_scheduler_name)
        self.podgroups: Informer | None = None
        self.priority_classes: Informer | None = None
        if self.gang is not None:
            api = self.gang.api
            self.podgroup_resource = Resource(api.group, api.version, api.plural)
        if self.gang is not None:
            self.priority_classes = Informer(
                kube, PRIORITY_CLASSES, on_event=lambda *_: None, watch_timeout=timeout
            )
            self.informers.append(self.priority_classes)
        # Kueue's objects, cached once the API server serves them (`watch_kueue_if_served`).
        self.workloads: Informer | None = None
        self.flavors: Informer | None = None
        self.workload_priorities: Informer | None = None
        self._gone: dict[ObjectKey, str] = {}  # deleted jobs' uids, until their Workloads go

    # -- running -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Sync the caches, then reconcile until `stop` is set; returns after a clean drain."""
        self._stop = stop
        for informer in list(self.informers):
            self._start_informer(informer)
        self.watch_podgroups_if_served()
        self.watch_kueue_if_served()
        while not stop.is_set() and not self.healthy():
            stop.wait(0.05)
        self.metrics.runtime.max_concurrent.set(self.config.workers)
        workers = [
            threading.Thread(target=self._work, daemon=True, name=f"worker-{i}")
            for i in range(self.config.workers)
        ]
        for worker in workers:
            worker.start()
        while not stop.wait(self.config.resync_seconds):
            self.watch_podgroups_if_served()
            self.watch_kueue_if_served()
            self.resync()
        self.queue.shut_down()
        for worker in workers:
            worker.join(timeout=30)
        self.events.close()
        for informer in self.informers:
            informer.close()
        for thread in self._threads:
            thread.join(timeout=10)

    def _start_informer(self, informer: Informer) -> None:
        thread = threading.Thread(
            target=informer.run,
            args=(self._stop,),
            daemon=True,
            name=f"informer-{informer.resource.plural}",
        )
        self._threads.append(thread)
        thread.start()

    def watch_podgroups_if_served(self) -> None:
        """Start the PodGroup cache once the API server serves the gang scheduler's CRD.

        Until then jobs get a GangScheduled=False condition saying the CRD is missing (upstream
        exits at start instead, which would crash-loop the Deployment); checked at start and at
        every resync, so installing the CRD later needs no restart.
        """
        if self.gang is None or self.podgroups is not None:
            return
        api = self.gang.api
        if not self.kube.serves(api.group, api.version):
            log.warning("gang scheduling: %s is not served (PodGroup CRD missing)", api.api_version)
            return
        informer = Informer(
            self.kube,
            self.podgroup_resource,
            namespace=self.config.namespace,
            on_event=self._on_podgroup,
            watch_timeout=self.config.watch_timeout,
        )
        self._caches[PODGROUP_KIND] = informer
        self._start_informer(informer)
        informer.synced.wait(timeout=30)  # so the first passes do not create it twice
        self.podgroups = informer
        self.informers.append(informer)

    def watch_kueue_if_served(self) -> None:
        """With `kueue`: start the caches of Workloads, ResourceFlavors and
        WorkloadPriorityClasses once Kueue's CRDs are served. Until then a labelled job is left
        suspended (its pass waits), as Kueue would leave it without its controller."""
        if not self.config.kueue or self.workloads is not None:
            return
        if not self.kube.serves(kueue.GROUP, kueue.VERSION):
            log.warning("kueue: %s is not served (Kueue's CRDs missing)", kueue.API_VERSION)
            return
        if self.priority_classes is None:
            self.priority_classes = Informer(
                self.kube,
                PRIORITY_CLASSES,
                on_event=_ignored,
                watch_timeout=self.config.watch_timeout,
            )
            self._start_informer(self.priority_classes)
            self.priority_classes.synced.wait(timeout=30)
            self.informers.append(self.priority_classes)
        caches = [
            Informer(
                self.kube,
                resource,
                namespace=scope,
                on_event=on_event,
                index=index,
                watch_timeout=self.config.watch_timeout,
            )
            for resource, scope, on_event, index in (
                (WORKLOADS, self.config.namespace, self._on_podgroup, _controller_uid_keys),
                (RESOURCE_FLAVORS, None, _ignored, None),
                (WORKLOAD_PRIORITY_CLASSES, None, _ignored, None),
            )
        ]
        for informer in caches:
            self._start_informer(informer)
        for informer in caches:
            informer.synced.wait(timeout=30)
        self._caches["Workload"] = caches[0]
        self.flavors, self.workload_priorities = caches[1], caches[2]
        self.workloads = caches[0]
        self.informers.extend(caches)

    def idle(self) -> bool:
        """Nothing queued, in progress or waiting to be sent (benchmarks and tests wait on it)."""
        return self.queue.idle() and self.events.idle()

    def healthy(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def resync(self) -> None:
        for job in self.jobs.items():
            self.queue.add((job["metadata"]["namespace"], job["metadata"]["name"]))

    def _work(self) -> None:
        while True:
            try:
                key = self.queue.get(timeout=1.0)
            except ShutDownError:
                return
            if key is None:
                continue
            self.process(key)  # type: ignore[arg-type]

    def process(self, key: ObjectKey) -> None:
        """One pass over a key taken from the queue, measured; a failure is retried later."""
        self.metrics.queue_depth.set(len(self.queue))
        runtime = self.metrics.runtime
        runtime.active_workers.inc()
        started = time.perf_counter()
        try:
            result = self.reconcile(key)
            self.queue.forget(key)
            self.metrics.reconciles.labels(result="ok").inc()
            runtime.reconciles[_outcome(result)].inc()
        except Exception:  # a bad job or API error must not stop the worker: retry with backoff
            log.exception("reconciling %s failed", key)
            self.metrics.reconciles.labels(result="error").inc()
            self.metrics.reconcile_errors.inc()
            runtime.reconciles["error"].inc()
            runtime.errors.inc()
            self.queue.retry(key)
        finally:
            self.queue.done(key)
            elapsed = time.perf_counter() - started
            self.metrics.reconcile_seconds.observe(elapsed)
            runtime.time.observe(elapsed)
            runtime.active_workers.dec()
            self._count_requests()

    def _count_requests(self) -> None:
        """Bring the request counters up to the client's totals (workers share the client)."""
        with self._counted_lock:
            requests, writes = self.kube.requests, self.kube.writes
            self.metrics.api_requests.inc(requests - self._counted[0])
            self.metrics.api_writes.inc(writes - self._counted[1])
            self._counted = (requests, writes)

    # -- events --------------------------------------------------------------------------------

    def _on_job(self, kind: str, job: JSON) -> None:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        if kind == "DELETED":
            with self._lock:
                self._expectations.pop(key, None)
                if self.config.kueue and kueue.queued(job):
                    self._gone[key] = job["metadata"].get("uid", "")
        self.queue.add(key)

    def _on_owned(self, kind: str, obj: JSON) -> None:
        self.queue.add(job_key_of(obj))
        owner = owning_job_key(obj)  # relabelled: its controller releases it
        if owner is not None and owner != job_key_of(obj):
            self.queue.add(owner)

    def _on_pod(self, kind: str, pod: JSON) -> None:
        """Upstream counts `deleted_pods_total` in its pod informer's delete handler: any
        deletion of a pod whose job it knows, the operator's own or another's."""
        if kind == "DELETED":
            job = self.jobs.get(job_key_of(pod))
            if job is not None and _controlled_by(pod, job["metadata"].get("uid")):
                self.metrics.objects["deleted_pods"].inc()
        self._on_owned(kind, pod)

    def _on_podgroup(self, kind: str, podgroup: JSON) -> None:
        key = owning_job_key(podgroup)
        if key is not None:
            self.queue.add(key)

    def _on_owned_hpa(self, kind: str, hpa: JSON) -> None:
        key = (hpa["metadata"]["namespace"], hpa["metadata"]["name"])
        if self.jobs.get(key) is not None:
            self.queue.add(key)

    # -- one pass ------------------------------------------------------------------------------

    def reconcile(self, key: ObjectKey) -> Plan | None:
        job = self.jobs.get(key)
        if job is None:
            self._delete_workloads_of_gone(key)
            return None
        if not self._expectations_met(key):
            return None
        self.claim(job)
        observed = self.observe(job)
        try:
            go_on, admitted = self._queue(job)
            if not go_on:
                return None
            observed = _with_queued_workers(observed, job, admitted)
            result = self._plan(job, observed, admitted=admitted)
            if any(kind == "Pod" for kind, _ in result.delete):
                # Removing pods is not undone by the next pass: decide it on a fresh read.
                # (When a job is deleted, the garbage collector may remove worker-0 before
                # the watch tells us the job is gone; a stale job would "restart" the rest.)
                fresh = self._fresh(job)
                if fresh is None:
                    return None
                job, result = fresh, self._plan(fresh, observed, admitted=admitted)
        except ValidationError as error:
            self._reject(job, error)
            return None
        self.apply(job, result, observed=observed)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)
        return result

    def _plan(
        self, job: JSON, observed: Observed, *, admitted: dict[str, int] | None = None
    ) -> Plan:
        """`admitted`: the replica counts Kueue admitted, the most pods the pass may run."""
        planned = job if admitted is None else kueue_capped(job, admitted)
        return plan(planned, observed, now=self.clock(), settings=self.config.pods, gang=self.gang)

    # -- Kueue ---------------------------------------------------------------------------------

    def _queue(self, job: JSON) -> tuple[bool, dict[str, int] | None]:
        """The Kueue integration's writes for a labelled job. Returns whether the pass goes on
        (not when the job's spec changed, or Kueue's objects are not cached yet) and the
        admitted replica counts (None: no limit)."""
        if not self.config.kueue or not kueue.queued(job):
            return True, None
        if self.workloads is None or self.flavors is None or self.workload_priorities is None:
            return False, None
        uid = job["metadata"].get("uid", "")
        queued = kueue.Queued(
            workloads=self.workloads.indexed(uid),
            flavors={f["metadata"]["name"]: f for f in self.flavors.items()},
            priorities=self._priorities(),
            workload_priorities={
                w["metadata"]["name"]: int(w.get("value") or 0)
                for w in self.workload_priorities.items()
            },
        )
        step = kueue.step(job, queued, now=self.clock())
        self._apply_queue_step(job, step)
        return not step.holds, step.admitted

    def _apply_queue_step(self, job: JSON, step: kueue.Step) -> None:
        assert self.workloads is not None
        namespace = job["metadata"]["namespace"]
        if step.job is not None:  # first: a conflict retries the pass from fresh caches
            self.jobs.apply("MODIFIED", self.kube.replace(step.job))
        for workload in step.create:
            with suppress(ConflictError):  # names are deterministic: created by an earlier pass
                self.workloads.apply("ADDED", self.kube.create(workload, resource=WORKLOADS))
        for workload in step.update:
            self.workloads.apply("MODIFIED", self.kube.replace(workload, resource=WORKLOADS))
        for workload in step.status:
            written = self.kube.replace(workload, sub="status", resource=WORKLOADS)
            self.workloads.apply("MODIFIED", written)
        for name in step.delete:
            with suppress(NotFoundError):
                self.kube.delete(WORKLOADS, namespace, name)
        for type_, reason, message in step.events:
            self._record(job, type_, reason, message)

    def _delete_workloads_of_gone(self, key: ObjectKey) -> None:
        """The Workloads of a deleted job (the garbage collector would too, where it runs)."""
        with self._lock:
            uid = self._gone.pop(key, None)
        if uid is None or self.workloads is None:
            return
        for workload in self.workloads.indexed(uid):
            with suppress(NotFoundError):
                self.kube.delete(WORKLOADS, key[0], workload["metadata"]["name"])
            finalizers = workload["metadata"].get("finalizers") or []
            if kueue.FINALIZER in finalizers:  # Kueue's, on a Workload taken over from it
                kept = [f for f in finalizers if f != kueue.FINALIZER]
                with suppress(NotFoundError):
                    patch = {"metadata": {"finalizers": kept}}
                    name = workload["metadata"]["name"]
                    self.kube.merge_patch(WORKLOADS, key[0], name, patch)

    def _fresh(self, job: JSON) -> JSON | None:
        """The job as the API server has it now (None, and forgotten, if it is gone)."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        try:
            fresh = self.kube.get(JOBS, namespace, name)
        except NotFoundError:
            self.jobs.apply("DELETED", job)
            return None
        self.jobs.apply("MODIFIED", fresh)
        return fresh

    def _reject(self, job: JSON, error: ValidationError) -> None:
        """A stored job the models cannot read (the CRD makes this rare): one Warning Event per
        generation, no retries; the next edit of the job brings it back."""
        key, generation = (
            (job["metadata"]["namespace"], job["metadata"]["name"]),
            job["metadata"].get("generation"),
        )
        if self._rejected.get(key) != generation:
            self._rejected[key] = generation
            self._record(job, "Warning", "InvalidSpec", first_error(error))

    def observe(self, job: JSON) -> Observed:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        uid = job["metadata"].get("uid")
        return Observed(
            pods=[pod for pod in self.pods.indexed(key) if _controlled_by(pod, uid)],
            services=[svc for svc in self.services.indexed(key) if _controlled_by(svc, uid)],
            hpa=self.hpas.get(key),
            podgroup=self.podgroups.get(key) if self.podgroups is not None else None,
            podgroup_api_missing=self.gang is not None and self.podgroups is None,
            priorities=self._priorities(),
        )

    def claim(self, job: JSON) -> None:
        """Adopt the job's orphans and release its own whose labels no longer match (upstream's
        `ClaimPods` and `ClaimServices`); before the first adoption, a fresh read checks that
        the job is still there and not being deleted."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        uid = job["metadata"].get("uid", "")
        decided = {
            kind: claims(
                [*cache.indexed((namespace, name)), *cache.indexed(("owner", uid))], job=job
            )
            for kind, cache in (("Pod", self.pods), ("Service", self.services))
        }
        if any(d["adopt"] for d in decided.values()):
            self._can_adopt(job)
        owner = controller_reference(name=name, uid=uid)
        failures = []
        for kind, decision in decided.items():
            patches = [(obj, adoption_patch(obj, owner), False) for obj in decision["adopt"]]
            patches += [(obj, release_patch(obj, uid), True) for obj in decision["release"]]
            for obj, patch, release in patches:
                if error := self._patch_owner(kind, obj, patch, release=release):
                    failures.append(error)
        if failures:
            raise failures[0]

    def _can_adopt(self, job: JSON) -> None:
        """Upstream's `RecheckDeletionTimestamp`, from an uncached read."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        try:
            fresh = self.kube.get(JOBS, namespace, name)
        except NotFoundError:
            raise AdoptionError(f"{namespace}/{name} is gone") from None
        if fresh["metadata"].get("uid") != job["metadata"].get("uid"):
            raise AdoptionError(f"original job {namespace}/{name} is gone: another uid now")
        if fresh["metadata"].get("deletionTimestamp"):
            raise AdoptionError(f"{namespace}/{name} has just been deleted")

    def _patch_owner(self, kind: str, obj: JSON, patch: JSON, *, release: bool) -> Exception | None:
        """One adoption or release; an object gone meanwhile is no failure, nor (as upstream's
        `ReleasePod`) a release the API server finds invalid (no such reference any more)."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            patched = self.kube.merge_patch(BY_KIND[kind], namespace, name, patch, strategic=True)
        except NotFoundError:
            return None
        except Exception as error:
            if release and getattr(error, "status", None) == INVALID:
                return None
            return error
        log.info("%s %s/%s %s", kind, namespace, name, "released" if release else "adopted")
        self._caches[kind].apply("MODIFIED", patched)
        return None

    def _priorities(self) -> dict[str, int]:
        if self.priority_classes is None:
            return {}
        return {
            pc["metadata"]["name"]: int(pc.get("value") or 0)
            for pc in self.priority_classes.items()
        }

    def apply(self, job: JSON, result: Plan, *, observed: Observed) -> None:
        """Every write of the plan; a failed one is reported and retried, the rest still done."""
        self._expect(job, result)
        failures = [error for obj in result.create if (error := self._create(job, obj))]
        for kind, name in result.delete:
            if error := self._delete(job, kind, name):
                failures.append(error)
        for obj in result.update:  # a conflict retries the whole pass from fresh caches
            written = self.kube.replace(obj, resource=self._resource(obj["kind"]))
            self._caches[obj["kind"]].apply("MODIFIED", written)
        for event in result.events:
            if self._first_time(event.once):
                self._record(job, event.type, event.reason, event.message)
        if result.status is not None:
            self._write_status(job, result.status, observed=observed)
        for counted in result.lifecycle:
            self._count_job(job, counted)
        for uid in result.failed_pods:
            if self._first_time(f"failed-pod/{uid}"):
                self.metrics.objects["failed_pods"].inc()
        if result.delete_job:
            with suppress(NotFoundError):
                self.kube.delete(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
                self._count_job(job, "deleted")
        if failures:
            raise failures[0]

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
            self._never_coming(job, (kind, name))
            self._count_object(FAILED_CREATE_COUNTERS, kind)
            return None
        except Exception as error:  # e.g. a template the pod API rejects: tell the user
            self._never_coming(job, (kind, name))
            self._count_object(FAILED_CREATE_COUNTERS, kind)
            self._record(job, "Warning", f"FailedCreate{kind}", f"Error creating: {_reason(error)}")
            return error
        self._count_object(CREATED_COUNTERS, kind)
        self._caches[kind].apply("ADDED", created)
        self._record(job, "Normal", f"SuccessfulCreate{kind}", f"Created {_noun(kind)}: {name}")
        return None

    def _delete(self, job: JSON, kind: str, name: str) -> Exception | None:
        try:
            self.kube.delete(self._resource(kind), job["metadata"]["namespace"], name)
        except NotFoundError:
            return None
        except Exception as error:
            self._never_coming(job, (kind, name))
            self._record(
                job, "Warning", f"FailedDelete{kind}", f"Error deleting {name}: {_reason(error)}"
            )
            return error
        self._count_object(DELETED_COUNTERS, kind)
        self._record(job, "Normal", f"SuccessfulDelete{kind}", f"Deleted {_noun(kind)}: {name}")
        return None

    def _count_job(self, job: JSON, what: str) -> None:
        namespace = job["metadata"]["namespace"]
        self.metrics.jobs[what].labels(job_namespace=namespace, framework=FRAMEWORK).inc()

    def _count_object(self, counters: dict[str, str], kind: str) -> None:
        if kind in counters:
            self.metrics.objects[counters[kind]].inc()

    def _first_time(self, once: str | None) -> bool:
        """False for an Event already sent under the same key (kept for the latest keys)."""
        if once is None:
            return True
        with self._lock:
            if once in self._sent_once:
                self._sent_once.move_to_end(once)
                return False
            self._sent_once[once] = None
            if len(self._sent_once) > self.config.once_events_remembered:
                self._sent_once.popitem(last=False)
            return True

    def _resource(self, kind: str) -> Resource:
        """Where objects of `kind` live; a PodGroup's group is the gang scheduler's."""
        return self.podgroup_resource if kind == PODGROUP_KIND else BY_KIND[kind]

    def _record(self, job: JSON, type_: str, reason: str, message: str) -> None:
        self.events.record(
            job_event(job, type_=type_, reason=reason, message=message, now=self.clock())
        )

    def _write_status(self, job: JSON, status: JSON, *, observed: Observed) -> None:
        """PUT /status; on a conflict, re-plan once from a fresh read of the job."""
        try:
            written = self.kube.replace({**job, "status": status}, sub="status")
        except NotFoundError:
            return  # deleted meanwhile: there is no status left to write
        except ConflictError:
            fresh = self.kube.get(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
            replanned = self._plan(fresh, observed)
            if replanned.status is None:
                return
            written = self.kube.replace({**fresh, "status": replanned.status}, sub="status")
        # Write-through: the next pass must see the new status even before the watch does,
        # or it would act on the old one (e.g. recreate the pods a failure just removed).
        self.jobs.apply("MODIFIED", written)

    # -- expectations --------------------------------------------------------------------------

    def _expect(self, job: JSON, result: Plan) -> None:
        created = {
            (obj["kind"], obj["metadata"]["name"])
            for obj in result.create
            if obj["kind"] in ("Pod", "Service")
        }
        deleted = {(kind, name) for kind, name in result.delete if kind in ("Pod", "Service")}
        if created or deleted:
            key = (job["metadata"]["namespace"], job["metadata"]["name"])
            with self._lock:
                self._expectations[key] = _Expectation(
                    created, deleted, self.monotonic() + EXPECTATION_TIMEOUT
                )

    def _never_coming(self, job: JSON, ref: tuple[str, str]) -> None:
        """A create or delete that failed never shows in the caches: stop waiting for it (as
        client-go lowers its expectations), so the retry plans at once. Otherwise a scale-up cut
        by a kube-apiserver crash waited out EXPECTATION_TIMEOUT: it finished 28 s after the
        server was back, against under 1 s with this (the fault matrix's apiserver case)."""
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        with self._lock:
            expectation = self._expectations.get(key)
            if expectation is not None:
                expectation.created.discard(ref)
                expectation.deleted.discard(ref)

    def _expectations_met(self, key: ObjectKey) -> bool:
        with self._lock:
            expectation = self._expectations.get(key)
        if expectation is None:
            return True
        cached = {
            (kind, name): self._caches[kind].get((key[0], name))
            for kind, name in expectation.created | expectation.deleted
        }
        seen = all(cached[ref] is not None for ref in expectation.created)
        gone = all(_gone(cached[ref]) for ref in expectation.deleted)
        if (seen and gone) or self.monotonic() > expectation.deadline:
            with self._lock:
                self._expectations.pop(key, None)
            return True
        return False


def _with_queued_workers(
    observed: Observed, job: JSON, admitted: dict[str, int] | None
) -> Observed:
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


def _controller_uid_keys(obj: JSON) -> list[Any]:
    uid = controller_uid(obj)
    return [] if uid is None else [uid]


def _ignored(kind: str, obj: JSON) -> None:
    """Cached for reading only: a change of them alone needs no pass."""


def _outcome(result: Plan | None) -> str:
    """controller-runtime's `result` label of a pass that returned without an error."""
    if result is None or result.requeue_after is None:
        return "success"
    return "requeue_after" if result.requeue_after > 0 else "requeue"


def _noun(kind: str) -> str:
    return EVENT_NOUNS.get(kind, kind.lower())


def _gone(obj: JSON | None) -> bool:
    return obj is None or bool(obj["metadata"].get("deletionTimestamp"))


def _controlled_by(obj: JSON, uid: str | None) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


def _reason(error: Exception) -> str:
    """The API server's message for a rejected write, else the error itself."""
    body = getattr(getattr(error, "__cause__", None), "body", None) or getattr(error, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message", body))
        except ValueError:
            return str(body)
    return str(error)
