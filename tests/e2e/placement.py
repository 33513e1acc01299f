"""Where the scenarios' jobs ran: the share of the time a job's running workers were on more
nodes than their GPUs fill (the spread share), watched from the API server, and the workers the
operator's planned placement pinned and moved, from its metrics.

A watch on the namespace's pods notes each job's running workers and their nodes whenever one
changes; `spread_time` weighs each layout by how long it lasted. A layout could have been spread
only when the job had more workers than the nodes they fill and the cluster more GPU nodes than
that: the seconds with that choice are what the check can tell the placements apart on."""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.api.packing import nodes_needed
from autoscaler.clients.kube import NODES, PODS, Resource
from autoscaler.controller.planned_placement import requested
from autoscaler.controller.pods import is_terminating, phase
from tests.e2e.watching import ListWatch
from tests.support.engine_process import ServiceProcess
from tests.support.node_agent import GPU

JSON = dict[str, Any]
TARGET_SPREAD_SHARE = 0.10
KIND = "spread"


@dataclass(frozen=True)
class Layout:
    """From `at`, a job's running workers: whether they are on more nodes than their GPUs fill
    (None: none runs), and whether they could have been (`spreadable`)."""

    at: float
    job: str
    spread: bool | None
    spreadable: bool = False


@dataclass(frozen=True)
class SpreadTime:
    """Seconds jobs ran with their workers spread, of the seconds they ran at all and of those
    they could have been spread; the workers the planned placement pinned, and those it moved,
    meanwhile."""

    spread_seconds: float
    running_seconds: float
    spreadable_seconds: float = 0.0
    placed_workers: int = 0
    moved_workers: int = 0

    @property
    def share(self) -> float:
        return self.spread_seconds / self.running_seconds if self.running_seconds else 0.0

    @property
    def spreadable_share(self) -> float:
        return self.spread_seconds / self.spreadable_seconds if self.spreadable_seconds else 0.0

    def to_json(self) -> str:
        return json.dumps({"kind": KIND, **asdict(self)})

    @property
    def line(self) -> str:
        return (
            f"e2e placement: running jobs spread over more nodes than their GPUs fill "
            f"{self.share:.0%} of {self.running_seconds:.0f} job-seconds (target "
            f"<= {TARGET_SPREAD_SHARE:.0%}), {self.spreadable_share:.0%} of the "
            f"{self.spreadable_seconds:.0f} in which they had room to spread; workers pinned by "
            f"the planned placement "
            f"{self.placed_workers}, moved {self.moved_workers}"
        )


def filled(placed: Sequence[tuple[str, int]], *, node_gpus: Mapping[str, int]) -> int:
    """The nodes running workers' ((node, GPUs) each) GPUs fill, on nodes the size of the
    largest they use."""
    per_node = max(node_gpus[node] for node, _ in placed)
    return nodes_needed(sum(size for _, size in placed), size=1, per_node=per_node)


def spread(workers: Iterable[tuple[str, int]], *, node_gpus: Mapping[str, int]) -> bool:
    """Whether running workers are on more nodes than their GPUs fill."""
    placed = list(workers)
    return len({node for node, _ in placed}) > filled(placed, node_gpus=node_gpus)


def spreadable(workers: Iterable[tuple[str, int]], *, node_gpus: Mapping[str, int]) -> bool:
    """Whether running workers could be on more nodes than their GPUs fill: there are more of
    them, and more GPU nodes (`node_gpus`: the cluster's), than those nodes."""
    placed = list(workers)
    return min(len(placed), len(node_gpus)) > filled(placed, node_gpus=node_gpus)


def spread_time(layouts: Sequence[Layout], *, end: float) -> SpreadTime:
    """Each job's layouts, each lasting until the job's next one (the last until `end`)."""
    spread_seconds = running_seconds = spreadable_seconds = 0.0
    by_job: dict[str, list[Layout]] = {}
    for layout in sorted(layouts, key=lambda layout: layout.at):
        by_job.setdefault(layout.job, []).append(layout)
    for timeline in by_job.values():
        ends = [layout.at for layout in timeline[1:]] + [end]
        for layout, until in zip(timeline, ends, strict=True):
            if layout.spread is not None:
                running_seconds += until - layout.at
                spread_seconds += (until - layout.at) * layout.spread
                spreadable_seconds += (until - layout.at) * layout.spreadable
    return SpreadTime(spread_seconds, running_seconds, spreadable_seconds)


def summed(measured: Iterable[SpreadTime]) -> SpreadTime:
    found = list(measured)
    return SpreadTime(
        spread_seconds=sum(m.spread_seconds for m in found),
        running_seconds=sum(m.running_seconds for m in found),
        spreadable_seconds=sum(m.spreadable_seconds for m in found),
        placed_workers=sum(m.placed_workers for m in found),
        moved_workers=sum(m.moved_workers for m in found),
    )


PLACED = "autoscaler_operator_placed_workers_total"
MOVED = "autoscaler_operator_moved_workers_total"


def counter(exposition: str, name: str) -> int:
    """An unlabelled counter's value in a metrics exposition (0 before its first increment)."""
    found = re.search(rf"^{name} (\S+)$", exposition, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def placement_counts(operator: ServiceProcess) -> tuple[int, int]:
    """The workers the operator's planned placement has pinned and moved since it started."""
    status, body = operator.get("/metrics")
    assert status == 200, body
    return counter(body, PLACED), counter(body, MOVED)


def gpus(pod: JSON) -> int:
    """The GPUs a pod's containers request."""
    return requested(pod["spec"], GPU)


def running_gpu_worker(pod: JSON) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return (
        labels.get(c.LABEL_REPLICA_TYPE) == c.WORKER.lower()
        and c.LABEL_JOB_NAME in labels
        and not is_terminating(pod)
        and phase(pod) == "Running"
        and bool(pod["spec"].get("nodeName"))
        and gpus(pod) > 0
    )


class PlacementWatch:
    """The layouts of a namespace's GPU jobs, from watches on its pods and on the nodes."""

    def __init__(self, api: client.ApiClient, namespace: str, operator: ServiceProcess) -> None:
        self.api, self.operator = api, operator
        self._counts = placement_counts(operator)
        self.layouts: list[Layout] = []
        self._latest: dict[str, tuple[bool | None, bool]] = {}  # each job's newest layout
        self._seen: dict[Resource, dict[str, JSON]] = {PODS: {}, NODES: {}}  # newest by name
        self._lock = threading.Lock()  # the two watches' threads note in turn
        self._watches = [
            ListWatch(
                api,
                resource,
                scope,
                on_list=functools.partial(self._listed, resource),
                on_event=functools.partial(self._changed, resource),
            )
            for resource, scope in ((NODES, None), (PODS, namespace))
        ]

    def start(self) -> PlacementWatch:
        for watch in self._watches:
            watch.start()
        return self

    def stop(self) -> SpreadTime:
        """Stop watching; the spread time up to now, and the workers placed since the start."""
        end, (placed, moved) = time.time(), placement_counts(self.operator)
        for watch in self._watches:
            watch.stop()
        spent = spread_time(self.layouts, end=end)
        return SpreadTime(
            spent.spread_seconds,
            spent.running_seconds,
            spent.spreadable_seconds,
            placed_workers=placed - self._counts[0],
            moved_workers=moved - self._counts[1],
        )

    def _listed(self, resource: Resource, items: list[JSON]) -> None:
        with self._lock:
            self._seen[resource] = {item["metadata"]["name"]: item for item in items}
            self._note()

    def _changed(self, resource: Resource, kind: str, item: JSON) -> None:
        with self._lock:
            if kind == "DELETED":
                self._seen[resource].pop(item["metadata"]["name"], None)
            elif kind in ("ADDED", "MODIFIED"):
                self._seen[resource][item["metadata"]["name"]] = item
            self._note()

    def _note(self) -> None:
        """A layout for each job whose spread changed (or that started or stopped running)."""
        now, node_gpus = time.time(), self._gpu_nodes()
        placed = self._placed(node_gpus)
        for job in set(self._latest) | set(placed):
            state = (
                (
                    spread(placed[job], node_gpus=node_gpus),
                    spreadable(placed[job], node_gpus=node_gpus),
                )
                if job in placed
                else (None, False)
            )
            if job not in self._latest or self._latest[job] != state:
                self._latest[job] = state
                self.layouts.append(Layout(now, job, *state))

    def _placed(self, node_gpus: Mapping[str, int]) -> dict[str, list[tuple[str, int]]]:
        """Each job's running GPU workers on nodes there are: (node, GPUs) each."""
        placed: dict[str, list[tuple[str, int]]] = {}
        for pod in self._seen[PODS].values():
            if running_gpu_worker(pod) and pod["spec"]["nodeName"] in node_gpus:
                job = pod["metadata"]["labels"][c.LABEL_JOB_NAME]
                placed.setdefault(job, []).append((pod["spec"]["nodeName"], gpus(pod)))
        return placed

    def _gpu_nodes(self) -> dict[str, int]:
        """The cluster's nodes with GPUs, and their GPUs (a node gone is not among them)."""
        capacity = {
            name: (node.get("status") or {}).get("capacity") or {}
            for name, node in self._seen[NODES].items()
        }
        return {name: int(held[GPU]) for name, held in capacity.items() if int(held.get(GPU, 0))}
