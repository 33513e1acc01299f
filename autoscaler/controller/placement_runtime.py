"""The planned placement's step and its I/O (`--planned-placement RESOURCE`): caches of the Nodes
and of every pod (the room on each node), the decisions of `planned_placement`, and their writes:
pins (a node selector, the gate lifted) and the deletion of workers that move.

One step at a time, on its own thread: woken by a change of a Node or a pod, or every second.
Pins written but not yet seen in the caches are remembered (`_ledger`), so that the next step
does not give their room away again.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api.models import PyTorchJob
from autoscaler.clients.informer import Informer
from autoscaler.clients.kube import NODES, PODS, Kube, NotFoundError
from autoscaler.controller import planned_placement as pp
from autoscaler.controller.keys import controlled_by, job_key_of
from autoscaler.controller.pods import is_terminating, replica_index, replica_type_of
from autoscaler.observability.metrics import OperatorMetrics

JSON = dict[str, Any]
Record = Callable[[JSON, str, str, str], None]  # (job, type, reason, message): an Event
log = logging.getLogger(__name__)
LEDGER_SECONDS = 60.0  # a pin the caches never show is forgotten after this
UNSCHEDULABLE_SECONDS = 30.0  # a pin kube-scheduler cannot bind is undone after this


class PlacementRuntime:
    """The placement step with its caches, ledger and writes; `run` is its thread."""

    # What it reads and writes, in every namespace: the room on each node, and its pins.
    ACCESS = (("list", NODES), ("watch", NODES), ("list", PODS), ("watch", PODS), ("patch", PODS))

    @classmethod
    def denied(cls, kube: Kube) -> list[str]:
        """The accesses of ACCESS the client's identity lacks, as `verb plural`."""
        return [f"{verb} {res.plural}" for verb, res in cls.ACCESS if not kube.may(verb, res)]

    def __init__(
        self,
        kube: Kube,
        *,
        resource: str,
        jobs: Informer,
        pods: Informer,
        record: Record,
        metrics: OperatorMetrics,
        watch_timeout: int,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """`jobs` and `pods`: the runner's caches of the jobs and the pods they own."""
        self.kube, self.resource, self.jobs, self.pods = kube, resource, jobs, pods
        self.record, self.metrics = record, metrics
        self.monotonic, self.clock = monotonic, clock
        self.nodes = Informer(kube, NODES, on_event=self._wake, watch_timeout=watch_timeout)
        self.every_pod = Informer(kube, PODS, on_event=self._wake, watch_timeout=watch_timeout)
        self._woken = threading.Event()
        self._lock = threading.Lock()
        self._ledger: dict[tuple[str, str], tuple[str, float]] = {}  # pod -> (node, when pinned)
        self._held: dict[tuple[str, str], int] = {}  # job -> workers it was last told wait

    @property
    def informers(self) -> list[Informer]:
        return [self.nodes, self.every_pod]

    def _wake(self, _kind: str, _obj: JSON) -> None:
        self._woken.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._woken.wait(1.0)
            self._woken.clear()
            try:
                self.step()
            except Exception:  # an API error must not stop placing: the next step tries again
                log.exception("the placement step failed")

    def step(self) -> None:
        """Pin what packs, move what must, tell the jobs whose workers wait."""
        with self._lock:
            self._forget_seen_pins()
            self._undo_unbindable_pins()
            units, jobs = self._units()
            self.metrics.waiting_workers.set(sum(map(pp.gated, pp.live(self.pods.items()))))
            if not units:
                self._held = {}
                return
            free = self._room()
            per_node = max(
                (pp.allocatable(node, self.resource) for node in self.nodes.items()), default=0
            )
            if per_node <= 0:
                return
            decisions = pp.place(units, free, per_node=per_node)
            told, self._held = self._held, {}
            for unit in units:
                decision = decisions.get(unit.key)
                job = jobs[unit.key]
                if decision is not None:
                    self._apply(job, decision)
                pinned = len(decision.pins) if decision is not None else 0
                self._tell_waiting(job, unit, waiting=len(unit.waiting) - pinned, told=told)

    @staticmethod
    def release(kube: Kube, pods: Iterable[JSON]) -> None:
        """Lift the gate from `pods` that have it: without the flag, the workers an earlier run
        left gated; with it, those of a job no longer placed so (opted out since, say)."""
        for pod in pp.live(pods):
            if pp.gated(pod):
                meta = pod["metadata"]
                with suppress(NotFoundError):
                    kube.merge_patch(PODS, meta["namespace"], meta["name"], pp.ungate_patch(pod))

    # -- inputs --------------------------------------------------------------------------------

    def _units(self) -> tuple[list[pp.Unit], dict[tuple[str, str], JSON]]:
        """The jobs with gated workers, as units, and the jobs themselves."""
        keys = {job_key_of(pod) for pod in self.pods.items() if pp.gated(pod)}
        nodes = {node["metadata"]["name"]: node for node in self.nodes.items()}
        units, jobs = [], {}
        for key in sorted(keys):
            job = self.jobs.get(key)
            if job is None:
                continue
            try:
                parsed = PyTorchJob.model_validate(job)
            except ValueError:
                continue  # the reconcile pass reports it
            if not pp.qualifies(parsed, replica_type=c.WORKER, resource=self.resource):
                self.release(self.kube, self.pods.indexed(key))  # kube-scheduler places them
                continue
            found = self._unit(key, job, parsed, nodes)
            if found is not None:
                units.append(found)
                jobs[key] = job
        return units, jobs

    def _unit(
        self, key: tuple[str, str], job: JSON, parsed: PyTorchJob, nodes: dict[str, JSON]
    ) -> pp.Unit | None:
        """The job's workers as a unit; None until all of them exist."""
        spec = (parsed.spec.pytorch_replica_specs[c.WORKER].template or {}).get("spec") or {}
        uid = job["metadata"].get("uid")
        own = [
            pod
            for pod in self.pods.indexed(key)
            if controlled_by(pod, uid) and replica_type_of(pod) == c.WORKER
        ]
        workers = tuple(
            pp.Worker(name=pod["metadata"]["name"], index=index, node=self._node(pod))
            for pod in pp.live(own)
            if (index := replica_index(pod)) is not None
        )
        if len(workers) < (parsed.spec.pytorch_replica_specs[c.WORKER].replicas or 0):
            return None  # placed once the reconcile pass has created them all
        policy = parsed.spec.elastic_policy
        return pp.Unit(
            key,
            minimum=(policy.min_replicas if policy is not None else None) or 1,
            size=pp.requested(spec, self.resource),
            workers=workers,
            leaving=any(is_terminating(pod) for pod in own),
            fits=lambda name: name in nodes and pp.allows(spec, nodes[name]),
        )

    def _room(self) -> dict[str, int]:
        """Free units per node, less the pins the caches do not show yet."""
        free = pp.room(self.nodes.items(), self.every_pod.items(), resource=self.resource)
        for key, (node, _) in self._ledger.items():
            cached = self.every_pod.get(key)
            if node in free and cached is not None and pp.node_of(cached) is None:
                free[node] -= pp.requested(cached.get("spec") or {}, self.resource)
        return free

    def _node(self, pod: JSON) -> str | None:
        """A worker's node, or the one it was pinned to by a write the cache has not shown yet."""
        found = pp.node_of(pod)
        if found is None and pp.gated(pod):
            entry = self._ledger.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
            return entry[0] if entry is not None else None
        return found

    # -- writes --------------------------------------------------------------------------------

    def _apply(self, job: JSON, decision: pp.Decision) -> None:
        namespace = job["metadata"]["namespace"]
        for name, node in decision.pins.items():
            pod = self.pods.get((namespace, name))
            if pod is None:
                continue
            try:
                self.kube.merge_patch(PODS, namespace, name, pp.pin_patch(pod, node))
            except NotFoundError:
                continue
            except Exception:  # e.g. a node selector of its own on the hostname: the next pod
                log.exception("pinning %s/%s to %s failed", namespace, name, node)
                continue
            self._ledger[(namespace, name)] = (node, self.monotonic())
            self.metrics.placed_workers.inc()
        for name in decision.movers:
            with suppress(NotFoundError):
                self.kube.delete(PODS, namespace, name)
                self.metrics.moved_workers.inc()
        parts = []
        if decision.pins:
            nodes = ", ".join(sorted(set(decision.pins.values())))
            parts.append(f"placed {len(decision.pins)} workers on {nodes}")
        if decision.movers:
            parts.append(f"moving {', '.join(decision.movers)}: their nodes left the placement")
        self.record(job, "Normal", "WorkersPlaced", "; ".join(parts))

    def _tell_waiting(
        self, job: JSON, unit: pp.Unit, *, waiting: int, told: dict[tuple[str, str], int]
    ) -> None:
        """An Event when the number of workers waiting for room changes to a new one (`told`:
        the numbers of the step before; a job not placed now is forgotten)."""
        if waiting > 0 and told.get(unit.key) != waiting:
            self.record(
                job,
                "Normal",
                "WorkersWaitForRoom",
                f"{waiting} workers wait for room: they are placed once they fit on as few"
                f" nodes as their {self.resource} fills",
            )
        self._held[unit.key] = waiting

    def _forget_seen_pins(self) -> None:
        now = self.monotonic()
        for key, (_, when) in list(self._ledger.items()):
            caches = (self.pods.get(key), self.every_pod.get(key))
            seen = all(cached is not None and not pp.gated(cached) for cached in caches)
            if seen or now - when > LEDGER_SECONDS:
                del self._ledger[key]

    def _undo_unbindable_pins(self) -> None:
        """A pinned worker kube-scheduler has not bound for UNSCHEDULABLE_SECONDS (another
        scheduler took its room) is deleted: its replacement is placed again."""
        limit = self.clock() - timedelta(seconds=UNSCHEDULABLE_SECONDS)
        for pod in pp.live(self.pods.items()):
            if not pp.unbindable_since(pod, before=limit):
                continue
            with suppress(NotFoundError):
                self.kube.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
