"""The engine's `Cluster` on Kubernetes: jobs, capacity, `/scale` writes, state, Events.

It sizes the kinds of job it is given (`job_kinds.JobKind`: PyTorchJob unless told otherwise)
and knows nothing of any one of them: where their objects are, how one reads, which pods are its
workers and how it is suspended or resumed are its kind's.

Jobs, nodes and pods come from informers (one LIST, then a watch each), started by the first
round, so a round reads memory: its requests are its writes plus a `/scale` read for each write
that met a job changed since the informer read it, however many jobs and pods the cluster has
(client-go's shared informers, as the HPA controller and kube-scheduler keep them).
"""

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from autoscaler.api import coordinates as c
from autoscaler.api.ownership import Owner
from autoscaler.api.timestamps import format_timestamp
from autoscaler.clients.capacity import free_capacity
from autoscaler.clients.informer import Informer
from autoscaler.clients.job_kinds import PYTORCHJOB, JobKind
from autoscaler.clients.jobs import worker_health
from autoscaler.clients.kube import NODES, PODS, ConflictError, Kube, NotFoundError
from autoscaler.clients.kueue_quota import QuotaReader, headroom
from autoscaler.clients.recorder import EventRecorder, InFlight
from autoscaler.engine.ports import JobKey, ManagedJob, ScaleResult
from autoscaler.observability.events import object_event

JSON = dict[str, Any]
SCALE_ATTEMPTS = 3
SYNC_TIMEOUT = 60.0  # s for the first LISTs; past it the round fails and the next one waits again
# Server-side timeout of the informers' watches: each re-opens that often (one request, in
# whichever round it falls), within client-go's reflectors' 5-10 min: a round shorter than
# that re-opens each watch at most once (`make bench-scale` counts requests per round).
WATCH_SECONDS = 300
log = logging.getLogger(__name__)


class CachesNotSyncedError(RuntimeError):
    """The informers have not listed yet: the round fails as a whole, no job is sized on it."""


class KubeCluster:
    def __init__(
        self,
        kube: Kube,
        *,
        kinds: Sequence[JobKind] = (PYTORCHJOB,),
        namespaces: Sequence[str] = (),
        recorder: EventRecorder | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """`kinds`: the kinds of job it sizes, each named once."""
        if not kinds or len({kind.kind for kind in kinds}) != len(kinds):
            raise ValueError(f"job kinds must be given, each once: {[k.kind for k in kinds]}")
        self.kube, self.clock = kube, clock
        self.kinds = tuple(kinds)
        self.namespaces = tuple(namespaces)
        # Events wait while the round's writes are under way: they would compete with them for
        # the API server, and no Event is worth a later count (measured by `make bench-scale`).
        self._writes = InFlight()
        self.recorder = recorder or EventRecorder(kube, wait_turn=self._writes.wait_idle)
        # Per kind (by name), the jobs it sizes itself; per job, the kind it was read as.
        self._engine_jobs: dict[str, set[JobKey]] = {}
        self._kind_of: dict[JobKey, JobKind] = {}
        self._warned_pods: set[tuple[str, str]] = set()  # (uid, resourceVersion)
        self._warned_twins: set[tuple[str, JobKey]] = set()  # (kind, job) left out: name taken
        # Each job's typed view, kept while its resourceVersion is unchanged: reading every job's
        # JSON again each round was most of a round that wrote nothing (`make bench-scale`).
        self._typed: dict[tuple[str, JobKey], tuple[str, ManagedJob | None]] = {}
        scopes = self.namespaces or (None,)  # None: every namespace
        self._job_informers = [
            (
                kind,
                Informer(
                    kube, kind.resource, namespace=ns, on_event=_ignore, watch_timeout=WATCH_SECONDS
                ),
            )
            for kind in self.kinds
            for ns in scopes
        ]
        self._nodes = Informer(kube, NODES, on_event=_ignore, watch_timeout=WATCH_SECONDS)
        self._pods = Informer(kube, PODS, on_event=_ignore, watch_timeout=WATCH_SECONDS)
        self._informers = [
            *(informer for _, informer in self._job_informers),
            self._nodes,
            self._pods,
        ]
        self._quota = QuotaReader(kube)
        self._stop = threading.Event()
        self._started = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _synced(self) -> None:
        """Start the informers on first use (only a leader's rounds use them); wait for their
        first LIST."""
        with self._started:
            if not self._threads:
                self._threads = [
                    threading.Thread(
                        target=informer.run,
                        args=(self._stop,),
                        daemon=True,
                        name=f"engine-informer-{informer.resource.plural}",
                    )
                    for informer in self._informers
                ]
                for thread in self._threads:
                    thread.start()
        for informer in self._informers:
            if not informer.synced.wait(SYNC_TIMEOUT):
                raise CachesNotSyncedError(f"no list of {informer.resource.plural} yet")

    def jobs(self) -> Sequence[ManagedJob]:
        self._synced()
        jobs: list[tuple[JobKind, ManagedJob]] = []
        typed: dict[tuple[str, JobKey], tuple[str, ManagedJob | None]] = {}
        kind_of: dict[JobKey, JobKind] = {}
        for kind, informer in self._job_informers:
            for obj in informer.items():
                metadata = obj.get("metadata") or {}
                key = (metadata.get("namespace", ""), metadata.get("name", ""))
                version = metadata.get("resourceVersion", "")
                cached = self._typed.get((kind.kind, key))
                if cached is not None and version and cached[0] == version:
                    job = cached[1]
                else:
                    job = self._typed_job(obj, kind)
                typed[(kind.kind, key)] = (version, job)
                if job is None:
                    continue
                if job.key in kind_of:  # the engine knows a job by its namespace and name
                    self._warn_twin(kind, job, kind_of[job.key])
                    continue
                kind_of[job.key] = kind
                jobs.append((kind, job))
        self._typed = typed  # jobs gone from the caches are forgotten
        self._kind_of = kind_of
        self._engine_jobs = {
            kind.kind: {job.key for of, job in jobs if of is kind and job.owner is Owner.ENGINE}
            for kind in self.kinds
        }
        pods = self._pods.items()
        health = {kind.kind: worker_health(pods, worker_of=kind.worker_of) for kind in self.kinds}
        self._quota.round()
        return [
            self._with_quota(_with_health(job, health[kind.kind].get(job.key)))
            for kind, job in jobs
        ]

    def _warn_twin(self, kind: JobKind, job: ManagedJob, first: JobKind) -> None:
        """A job of a second kind named as one already read: left out (logged once), as the
        engine keys its jobs by namespace and name."""
        if (kind.kind, job.key) not in self._warned_twins:
            self._warned_twins.add((kind.kind, job.key))
            log.warning("%s %s/%s not sized: a %s has its name", kind.kind, *job.key, first.kind)

    def _kind(self, job: ManagedJob) -> JobKind:
        """The kind `job` was read as (the only one, when the cluster sizes one kind)."""
        kind = self._kind_of.get(job.key)
        if kind is not None:
            return kind
        if len(self.kinds) == 1:
            return self.kinds[0]
        raise LookupError(f"job {job.namespace}/{job.name} was not read as any kind")

    def _with_quota(self, job: ManagedJob) -> ManagedJob:
        """An engine-sized job under a Kueue queue (it opted into workload slices) with the
        workers its ClusterQueue admits now."""
        if job.owner is not Owner.ENGINE or not job.queue:
            return job
        free = self._quota.free(job.namespace, job.queue)
        room = None if free is None else headroom(free, job.resources_per_replica)
        return job if room is None else dataclasses.replace(job, quota_headroom=room)

    def capacity(self) -> Mapping[str, float]:
        """Allocatable of Ready, schedulable nodes minus requests of pods it does not size."""
        self._synced()
        pods = [pod for pod in self._pods.items() if self._counts_against(pod)]
        free, skipped = free_capacity(self._nodes.items(), pods)
        self._warn_skipped(skipped)
        return free

    def _warn_skipped(self, skipped: Sequence[tuple[JSON, str]]) -> None:
        """A Warning Event and a log line per unreadable pod, once per version of it."""
        warned = set()
        for pod, error in skipped:
            meta = pod["metadata"]
            version = (meta.get("uid", ""), meta.get("resourceVersion", ""))
            warned.add(version)
            if version in self._warned_pods:
                continue
            message = f"left out of the engine's free capacity: {error}"
            log.warning("pod %s/%s %s", meta.get("namespace"), meta.get("name"), message)
            self.recorder.record(
                object_event(
                    pod,
                    api_version="v1",
                    kind="Pod",
                    type_="Warning",
                    reason="UnreadableRequests",
                    message=message,
                    now=self.clock(),
                    component=c.ENGINE_NAME,
                )
            )
        self._warned_pods = warned  # pods gone or fixed are forgotten

    def _typed_job(self, obj: JSON, kind: JobKind | None = None) -> ManagedJob | None:
        """The job's typed view, read as `kind` (the first the cluster sizes by default); None
        for jobs that are not elastic and for unreadable ones, which get a Warning Event (read
        once per version of the job)."""
        kind = kind or self.kinds[0]
        try:
            return kind.managed_job(obj)
        except (KeyError, TypeError, ValueError) as error:  # the CRD schema should prevent it
            message = f"not sized by the engine: {error!r}"
            log.warning("job %s %s", obj.get("metadata", {}).get("name"), message)
            if {"name", "namespace"} <= set(obj.get("metadata") or {}):
                self._job_event(kind, obj, type_="Warning", reason="UnreadableJob", message=message)
            return None

    def _job_event(
        self, kind: JobKind, obj: JSON, *, type_: str, reason: str, message: str
    ) -> None:
        self.recorder.record(
            object_event(
                obj,
                api_version=kind.api_version,
                kind=kind.kind,
                type_=type_,
                reason=reason,
                message=message,
                now=self.clock(),
                component=c.ENGINE_NAME,
            )
        )

    def _counts_against(self, pod: JSON) -> bool:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        return not any(
            kind.worker_of(pod) in self._engine_jobs.get(kind.kind, ()) for kind in self.kinds
        )

    def scale(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        """Write the count if the job still has the one the decision was made from (`job.replicas`).

        One request while the job is as the informer read it: a PUT of the Scale under that
        resourceVersion, which the API server makes a precondition on the job itself. Upstream,
        k8s.io/apiextensions-apiserver v0.36.3 pkg/registry/customresource/etcd.go: the scale
        update (scaleUpdatedObjectInfo.UpdatedObject) sets a non-empty Scale resourceVersion on
        the custom resource; k8s.io/apiserver v0.36.3 pkg/registry/generic/registry/store.go then
        answers 409 Conflict when it is not the stored one. On that 409 (the job changed since:
        the operator's status write, say), or with no version known, read /scale and write under
        the read's version, so a count changed meanwhile is still never written over."""
        with self._writes.one():
            return self._scale(job, replicas=replicas)

    def _scale(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        path = self._kind(job).scale_path(job.namespace, job.name)
        if job.resource_version:  # empty, the PUT would be unconditional: never sent so
            try:
                written = self.kube.request("PUT", path, body=scale_body(job, replicas=replicas))
                return ScaleResult(written=True, replicas=int(written["spec"]["replicas"]))
            except ConflictError:
                pass  # what changed may be the count: only a fresh read tells
            except (NotFoundError, ApiException) as error:
                return ScaleResult(written=False, replicas=job.replicas, error=_describe(error))
        return self._read_compare_write(job, path, replicas=replicas)

    def _read_compare_write(self, job: ManagedJob, path: str, *, replicas: int) -> ScaleResult:
        """GET /scale, refuse if its count is not `job.replicas`, else PUT it back under the
        read's resourceVersion; a conflict (written meanwhile) is retried from a fresh read."""
        for _ in range(SCALE_ATTEMPTS):
            try:
                scale = self.kube.request("GET", path)
                current = int(scale["spec"].get("replicas") or 0)
                if current != job.replicas:
                    return ScaleResult(
                        written=False,
                        replicas=current,
                        error=f"the count changed to {current} meanwhile",
                    )
                scale["spec"]["replicas"] = replicas
                written = self.kube.request("PUT", path, body=scale)
                return ScaleResult(written=True, replicas=int(written["spec"]["replicas"]))
            except ConflictError:
                continue
            except (NotFoundError, ApiException) as error:
                return ScaleResult(written=False, replicas=job.replicas, error=_describe(error))
        return ScaleResult(
            written=False,
            replicas=job.replicas,
            error=f"{SCALE_ATTEMPTS} write conflicts in a row after reading /scale",
        )

    def suspend(self, job: ManagedJob, *, since: datetime) -> ScaleResult:
        """One merge patch under the version the job was read at: suspend and the marker (an
        API server answers 409 to a stale `metadata.resourceVersion` in a patch)."""
        marker = {c.ANNOTATION_HELD_SINCE: format_timestamp(since)}
        patch = self._kind(job).queueing_patch(job, suspend=True, annotations=marker)
        return self._patch_job(job, patch, replicas=job.replicas)

    def resume(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        """One merge patch under the version the job was read at: the count, suspend unset and
        the marker removed, so no other write can come between them."""
        patch = self._kind(job).queueing_patch(
            job, suspend=False, annotations={c.ANNOTATION_HELD_SINCE: None}, replicas=replicas
        )
        return self._patch_job(job, patch, replicas=replicas)

    def _patch_job(self, job: ManagedJob, patch: JSON, *, replicas: int) -> ScaleResult:
        if not job.resource_version:  # unconditional, it could undo another write: never sent
            return ScaleResult(written=False, replicas=job.replicas, error="no version known")
        try:
            with self._writes.one():
                self.kube.merge_patch(self._kind(job).resource, job.namespace, job.name, patch)
        except ConflictError:
            error = "the job changed since it was read: decided again next round"
            return ScaleResult(written=False, replicas=job.replicas, error=error)
        except (NotFoundError, ApiException) as error:
            return ScaleResult(written=False, replicas=job.replicas, error=_describe(error))
        return ScaleResult(written=True, replicas=replicas)

    def save_state(self, job: ManagedJob, *, state: str) -> ManagedJob | None:
        patch: JSON = {"metadata": {"annotations": {c.ANNOTATION_STATE: state}}}
        if job.held_since is not None and not job.suspended:  # resumed by someone else
            patch["metadata"]["annotations"][c.ANNOTATION_HELD_SINCE] = None
        kind = self._kind(job)
        with self._writes.one():
            saved = self.kube.merge_patch(kind.resource, job.namespace, job.name, patch)
        try:
            return kind.managed_job(saved)
        except (KeyError, TypeError, ValueError):  # unreadable: the informer's read reports it
            return None

    def event(self, job: ManagedJob, *, reason: str, message: str, warning: bool = False) -> None:
        involved = {"metadata": {"name": job.name, "namespace": job.namespace, "uid": job.uid}}
        type_ = "Warning" if warning else "Normal"
        self._job_event(self._kind(job), involved, type_=type_, reason=reason, message=message)

    def close(self) -> None:
        self._stop.set()
        for informer in self._informers:
            informer.close()
        for thread in self._threads:
            thread.join(timeout=10)
        self.recorder.close()


def queueing_patch(
    job: ManagedJob,
    *,
    suspend: bool,
    annotations: Mapping[str, str | None],
    replicas: int | None = None,
    kind: JobKind = PYTORCHJOB,
) -> JSON:
    """The merge patch that suspends or resumes the job (a PyTorchJob unless `kind` says
    otherwise), under the version it was read at."""
    return kind.queueing_patch(job, suspend=suspend, annotations=annotations, replicas=replicas)


def scale_body(job: ManagedJob, *, replicas: int) -> JSON:
    """The job's autoscaling/v1 Scale asking for `replicas`, under the version it was read at."""
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "resourceVersion": job.resource_version,
        },
        "spec": {"replicas": replicas},
    }


def _with_health(job: ManagedJob, health: tuple[int, int] | None) -> ManagedJob:
    """The job with its worker pods' health (none placed: all zero)."""
    unready, restarts = health or (0, 0)
    if (unready, restarts) == (job.unready, job.restarts):
        return job
    return dataclasses.replace(job, unready=unready, restarts=restarts)


def _ignore(kind: str, obj: JSON) -> None:
    """The engine reads the caches each round; it reacts to no single change."""


def _describe(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status}: {error.reason}"
    return str(error) or type(error).__name__
