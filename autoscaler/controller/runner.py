"""The operator loop: informers feed a work queue keyed by job; workers run one pass per key.

Everything decided is decided by `reconcile.plan` (pure); this module wires the caches and the
queue, and hands adoption, the writes and Kueue's steps to their own modules.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from autoscaler.api import coordinates as c
from autoscaler.api.errors import first_error
from autoscaler.clients.informer import Informer, ObjectKey
from autoscaler.clients.kube import HPAS, JOBS, PODS, SERVICES, Kube, NotFoundError, Resource
from autoscaler.clients.recorder import EventRecorder
from autoscaler.clients.stopping import stopped_within
from autoscaler.controller.adoption import Adoption
from autoscaler.controller.application import Application
from autoscaler.controller.builders import UPSTREAM_DEFAULTS, PodSettings
from autoscaler.controller.counting import (
    RequestCounter,
    count_failed_pass,
    count_pass,
    measured_pass,
)
from autoscaler.controller.expectations import Expectations
from autoscaler.controller.gang import GangScheduler, gang_scheduler
from autoscaler.controller.keys import controlled_by, job_key_of, owned_keys, owning_job_key
from autoscaler.controller.kueue_runtime import KueueRuntime, kueue_capped, with_queued_workers
from autoscaler.controller.naming import selector
from autoscaler.controller.placement_runtime import PlacementRuntime
from autoscaler.controller.reconcile import plan
from autoscaler.controller.reconcile_pass import Observed, Plan
from autoscaler.controller.served_caches import ServedCaches
from autoscaler.controller.workqueue import ShutDownError, WorkQueue
from autoscaler.observability.metrics import OperatorMetrics, operator_metrics

JSON = dict[str, Any]
log = logging.getLogger(__name__)
OWNED_SELECTOR = selector({c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME})


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
        self.kube, self.config, self.clock = kube, config, clock
        self.metrics = metrics or operator_metrics()
        self.requests = RequestCounter(self.metrics, lambda: (kube.requests, kube.writes))
        self.queue = WorkQueue(metrics=self.metrics.runtime.queue)
        self.events = EventRecorder(kube)
        self.expectations = Expectations(monotonic)
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
        self._informers = [self.jobs, self.pods, self.services, self.hpas]
        self._rejected: dict[ObjectKey, Any] = {}
        self._caches: dict[str, Informer] = {
            "Pod": self.pods,
            "Service": self.services,
            "HorizontalPodAutoscaler": self.hpas,
        }
        self._threads: list[threading.Thread] = []
        self.gang: GangScheduler | None = gang_scheduler(config.gang_scheduler_name)
        # Caches started once the API server serves their CRD (PodGroups, Kueue's objects).
        self.served = ServedCaches(
            kube,
            gang=self.gang,
            namespace=scope,
            watch_timeout=timeout,
            caches=self._caches,
            start=self._start_informer,
            on_event=self._on_podgroup,
        )
        self.adoption = Adoption(kube, self._caches)
        self.application = Application(
            kube,
            caches=self._caches,
            jobs=self.jobs,
            events=self.events,
            metrics=self.metrics,
            expectations=self.expectations,
            clock=clock,
            gang=self.gang,
            replan=self._plan,
            once_events_remembered=config.once_events_remembered,
        )
        # --planned-placement: its caches of the Nodes and every pod, and its step's thread.
        self.placement: PlacementRuntime | None = None
        resource = config.pods.placement_resource
        if resource:
            self.placement = PlacementRuntime(
                kube,
                resource=resource,
                jobs=self.jobs,
                pods=self.pods,
                record=self.application.record,
                metrics=self.metrics,
                watch_timeout=timeout,
                monotonic=monotonic,
                clock=clock,
            )
            self._informers += self.placement.informers
        # Kueue's objects are cached once the API server serves them (`watch_kueue_if_served`).
        self.kueue_runtime = KueueRuntime(
            kube,
            enabled=lambda: self.config.kueue,
            jobs=self.jobs,
            record=self.application.record,
            priorities=self.served.priorities,
            clock=clock,
        )

    # -- running -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Sync the caches, then reconcile until `stop` is set; returns after a clean drain."""
        self._stop = stop
        for informer in list(self.informers):
            self._start_informer(informer)
        self.served.watch_podgroups_if_served()
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
        if self.placement is None:
            PlacementRuntime.release(self.kube, self.pods.items())
        else:
            placing = threading.Thread(
                target=self.placement.run, args=(stop,), daemon=True, name="placement"
            )
            self._threads.append(placing)
            placing.start()
        while not stopped_within(stop, self.config.resync_seconds):
            self.served.watch_podgroups_if_served()
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

    @property
    def informers(self) -> list[Informer]:
        """Every cache: the jobs and what they own, then those started once served."""
        return [*self._informers, *self.served.informers]

    def watch_kueue_if_served(self) -> None:
        """With `kueue`: start Kueue's caches once its CRDs are served (`served_caches`). Until
        then a labelled job is left suspended (its pass waits), as Kueue would leave it without
        its controller."""
        if self.config.kueue and self.kueue_runtime.caches is None:
            self.kueue_runtime.caches = self.served.watch_kueue_if_served()

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
        with measured_pass(self.metrics):
            try:
                result = self.reconcile(key)
                self.queue.forget(key)
                count_pass(self.metrics, result)
            except Exception:  # a bad job or API error must not stop the worker: retry later
                log.exception("reconciling %s failed", key)
                count_failed_pass(self.metrics)
                self.queue.retry(key)
            finally:
                self.queue.done(key)
        self.requests.catch_up()

    # -- events --------------------------------------------------------------------------------

    def _on_job(self, kind: str, job: JSON) -> None:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        if kind == "DELETED":
            self.expectations.forget(key)
            self.kueue_runtime.job_deleted(key, job)
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
            if job is not None and controlled_by(pod, job["metadata"].get("uid")):
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
            self.kueue_runtime.delete_workloads_of_gone(key)
            return None
        if not self.expectations.met(key, self._cached):
            return None
        self.adoption.claim(job)
        observed = self.observe(job)
        try:
            go_on, admitted = self.kueue_runtime.admit(job)
            if not go_on:
                return None
            observed = with_queued_workers(observed, job, admitted)
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
            self.application.record(job, "Warning", "InvalidSpec", first_error(error))

    def observe(self, job: JSON) -> Observed:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        uid = job["metadata"].get("uid")
        return Observed(
            pods=[pod for pod in self.pods.indexed(key) if controlled_by(pod, uid)],
            services=[svc for svc in self.services.indexed(key) if controlled_by(svc, uid)],
            hpa=self.hpas.get(key),
            podgroup=self.served.podgroup(key),
            podgroup_api_missing=self.served.podgroup_api_missing,
            priorities=self.served.priorities(),
        )

    def apply(self, job: JSON, result: Plan, *, observed: Observed) -> None:
        """Every write of the plan (`application`)."""
        self.application.apply(job, result, observed=observed)

    def _cached(self, kind: str, key: ObjectKey) -> JSON | None:
        return self._caches[kind].get(key)
