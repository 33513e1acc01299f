"""The operator's caches of objects whose CRD may be missing, each started once the API server
serves it: the gang scheduler's PodGroups, Kueue's Workloads, ResourceFlavors and
WorkloadPriorityClasses; and the PriorityClasses both read.

The runner asks at start and at every resync, so installing a CRD later needs no restart.
"""

import logging
from collections.abc import Callable
from typing import Any

from autoscaler.clients.informer import Informer, ObjectKey
from autoscaler.clients.kube import (
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    Kube,
)
from autoscaler.controller import kueue
from autoscaler.controller.application import podgroup_resource
from autoscaler.controller.gang import PODGROUP_KIND, GangScheduler
from autoscaler.controller.keys import controller_uid_keys
from autoscaler.controller.kueue_runtime import KueueCaches

JSON = dict[str, Any]
OnEvent = Callable[[str, JSON], None]
log = logging.getLogger(__name__)


class ServedCaches:
    """`start` runs an informer (the runner's thread); `caches` is the runner's caches by kind,
    which gains the PodGroups and the Workloads once they are watched; `on_event` is told of a
    change of either. `informers` lists those started here, for the runner's health and close."""

    def __init__(
        self,
        kube: Kube,
        *,
        gang: GangScheduler | None,
        namespace: str | None,
        watch_timeout: int,
        caches: dict[str, Informer],
        start: Callable[[Informer], None],
        on_event: OnEvent,
    ) -> None:
        self.kube, self.gang, self.caches = kube, gang, caches
        self.namespace, self.watch_timeout = namespace, watch_timeout
        self.start, self.on_event = start, on_event
        self.informers: list[Informer] = []
        self.podgroups: Informer | None = None
        self.priority_classes: Informer | None = None
        self.kueue: KueueCaches | None = None
        if gang is not None:
            self.podgroup_resource = podgroup_resource(gang)
            self.priority_classes = self._priority_classes_cache()
            self.informers.append(self.priority_classes)

    def watch_podgroups_if_served(self) -> None:
        """Start the PodGroup cache once the API server serves the gang scheduler's CRD.

        Until then jobs get a GangScheduled=False condition saying the CRD is missing (upstream
        exits at start instead, which would crash-loop the Deployment).
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
            namespace=self.namespace,
            on_event=self.on_event,
            watch_timeout=self.watch_timeout,
        )
        self.caches[PODGROUP_KIND] = informer
        self.start(informer)
        informer.synced.wait(timeout=30)  # so the first passes do not create it twice
        self.podgroups = informer
        self.informers.append(informer)

    def watch_kueue_if_served(self) -> KueueCaches | None:
        """The caches of Workloads, ResourceFlavors and WorkloadPriorityClasses, started once
        Kueue's CRDs are served (None until then)."""
        if self.kueue is not None:
            return self.kueue
        if not self.kube.serves(kueue.GROUP, kueue.VERSION):
            log.warning("kueue: %s is not served (Kueue's CRDs missing)", kueue.API_VERSION)
            return None
        if self.priority_classes is None:
            self.priority_classes = self._priority_classes_cache()
            self.start(self.priority_classes)
            self.priority_classes.synced.wait(timeout=30)
            self.informers.append(self.priority_classes)
        caches = [
            Informer(
                self.kube,
                resource,
                namespace=scope,
                on_event=on_event,
                index=index,
                watch_timeout=self.watch_timeout,
            )
            for resource, scope, on_event, index in (
                (WORKLOADS, self.namespace, self.on_event, controller_uid_keys),
                (RESOURCE_FLAVORS, None, _ignored, None),
                (WORKLOAD_PRIORITY_CLASSES, None, _ignored, None),
            )
        ]
        for informer in caches:
            self.start(informer)
        for informer in caches:
            informer.synced.wait(timeout=30)
        self.caches["Workload"] = caches[0]
        self.kueue = KueueCaches(*caches)
        self.informers.extend(caches)
        return self.kueue

    def _priority_classes_cache(self) -> Informer:
        """PriorityClasses, read by the gang scheduler's PodGroups and by Kueue's priorities."""
        return Informer(
            self.kube, PRIORITY_CLASSES, on_event=_ignored, watch_timeout=self.watch_timeout
        )

    def podgroup(self, key: ObjectKey) -> JSON | None:
        return self.podgroups.get(key) if self.podgroups is not None else None

    @property
    def podgroup_api_missing(self) -> bool:
        return self.gang is not None and self.podgroups is None

    def priorities(self) -> dict[str, int]:
        if self.priority_classes is None:
            return {}
        return {
            pc["metadata"]["name"]: int(pc.get("value") or 0)
            for pc in self.priority_classes.items()
        }


def _ignored(kind: str, obj: JSON) -> None:
    """Cached for reading only: a change of them alone needs no pass."""
