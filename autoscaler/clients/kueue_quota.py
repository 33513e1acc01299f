"""How many more workers Kueue's quota admits now for an elastic job under a queue.

A queued elastic job's scale-up waits as a Workload slice until its ClusterQueue has room for the
added pods; how long is not known (it ends when another job finishes or is preempted). So the
engine offers its policy no count beyond what the ClusterQueue's free quota admits now: the job
is priced at the counts it can reach without waiting. Read with two GETs per queue and round
(the LocalQueue names its ClusterQueue), only for jobs that opted into Kueue's workload slices.
"""

import logging
from collections.abc import Mapping
from typing import Any

from autoscaler.api.quantity import parse_quantity
from autoscaler.clients.kube import CLUSTER_QUEUES, LOCAL_QUEUES, Kube
from autoscaler.policies.rounding import floor_count

JSON = Mapping[str, Any]
log = logging.getLogger(__name__)


def free_quota(cluster_queue: JSON) -> dict[str, float]:
    """Per resource the ClusterQueue covers, the most nominal quota not yet reserved in any one
    flavour (a slice must fit in the flavour its job already holds, which is one of them)."""
    reserved = {
        (flavour.get("name", ""), usage.get("name", "")): parse_quantity(usage.get("total") or 0)
        for flavour in (cluster_queue.get("status") or {}).get("flavorsReservation") or []
        for usage in flavour.get("resources") or []
    }
    free: dict[str, float] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavour in group.get("flavors") or []:
            for quota in flavour.get("resources") or []:
                name = quota.get("name", "")
                left = parse_quantity(quota.get("nominalQuota") or 0)
                left -= reserved.get((flavour.get("name", ""), name), 0.0)
                free[name] = max(free.get(name, 0.0), left, 0.0)
    return free


def headroom(free: Mapping[str, float], per_replica: Mapping[str, float]) -> int | None:
    """Workers more that fit in `free`; None when the queue limits none of a worker's requests."""
    limited = [
        (free[name], amount) for name, amount in per_replica.items() if amount > 0 and name in free
    ]
    if not limited:
        return None
    return min(floor_count(left / amount) for left, amount in limited)


class QuotaReader:
    """The free quota behind each LocalQueue, read once per round (`round` forgets the last)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._free: dict[tuple[str, str], dict[str, float] | None] = {}

    def round(self) -> None:
        self._free = {}

    def free(self, namespace: str, queue: str) -> dict[str, float] | None:
        """None when the queue or its ClusterQueue cannot be read (Kueue absent, no RBAC)."""
        key = (namespace, queue)
        if key not in self._free:
            self._free[key] = self._read(namespace, queue)
        return self._free[key]

    def _read(self, namespace: str, queue: str) -> dict[str, float] | None:
        try:
            local = self.kube.get(LOCAL_QUEUES, namespace, queue)
            name = (local.get("spec") or {}).get("clusterQueue", "")
            return free_quota(self.kube.get(CLUSTER_QUEUES, "", name)) if name else None
        except Exception as error:  # one unreadable queue must not fail the round
            log.warning("quota of queue %s/%s unread, scale-ups offered unbounded: %r",
                        namespace, queue, error)  # fmt: skip
            return None
