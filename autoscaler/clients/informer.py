"""List-and-watch caches of Kubernetes objects (a small client-go informer)."""

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from autoscaler.clients.kube import ExpiredError, Kube, Resource

JSON = dict[str, Any]
ObjectKey = tuple[str, str]
Handler = Callable[[str, JSON], None]
IndexKeys = Callable[[JSON], Iterable[Any]]  # as client-go's IndexFunc: any number
log = logging.getLogger(__name__)


def object_key(obj: JSON) -> ObjectKey:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


class Informer:
    """Keeps every object of one resource (optionally label-selected) and reports changes.

    `on_event(type, obj)` runs on the informer's thread for ADDED/MODIFIED/DELETED, including
    the differences a re-list finds. `index` files objects under its keys for `indexed()`.
    """

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        on_event: Handler,
        namespace: str | None = None,
        selector: str = "",
        index: IndexKeys | None = None,
        watch_timeout: int = 60,
    ) -> None:
        """`namespace`: only that namespace's objects (all namespaces when None)."""
        self.kube, self.resource, self.selector = kube, resource, selector
        self.namespace = namespace
        self.on_event, self.index = on_event, index
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self._lock = threading.Lock()
        self._objects: dict[ObjectKey, JSON] = {}
        self._indexed: dict[Any, dict[ObjectKey, JSON]] = {}
        self._response: Any = None

    def get(self, key: ObjectKey) -> JSON | None:
        with self._lock:
            return self._objects.get(key)

    def items(self) -> list[JSON]:
        with self._lock:
            return list(self._objects.values())

    def indexed(self, value: Any) -> list[JSON]:
        with self._lock:
            return list(self._indexed.get(value, {}).values())

    def run(self, stop: threading.Event) -> None:
        """List, then watch until `stop`; list again when the watch expires or breaks."""
        failures = 0
        while not stop.is_set():
            try:
                version = self.relist()
                self.synced.set()
                failures = 0
                while not stop.is_set():
                    version = self.watch(version, stop=stop)
            except ExpiredError:
                # 410 Gone: the version we watch from is older than the API server still
                # holds (etcd compacted it, or a restarted server's watch cache starts later).
                # What changed since is only in a fresh list.
                log.info("the watch of %s expired (410 Gone); listing again", self.resource.plural)
                continue
            except Exception:  # any transport error: back off, then list again
                if stop.is_set():
                    return
                failures += 1
                log.exception("informer for %s failed; listing again", self.resource.plural)
                stop.wait(min(0.2 * 2**failures, 10.0))

    def close(self) -> None:
        """End the current watch now (after `stop` is set), instead of at its timeout."""
        response = self._response
        if response is not None:
            # A watch that already ended has released its connection to the pool (urllib3 then
            # raises RuntimeError, or ValueError once closed): nothing is left to interrupt.
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                response.shutdown()

    def relist(self) -> str:
        listing = self.kube.list(self.resource, namespace=self.namespace, selector=self.selector)
        fresh = {object_key(obj): obj for obj in listing.get("items") or []}
        with self._lock:
            gone = [obj for key, obj in self._objects.items() if key not in fresh]
        for obj in gone:
            self.apply("DELETED", obj)
        for obj in fresh.values():
            self.apply("MODIFIED" if self.get(object_key(obj)) else "ADDED", obj)
        return str(listing["metadata"]["resourceVersion"])

    def watch(self, version: str, *, stop: threading.Event) -> str:
        events = self.kube.watch(
            self.resource,
            resource_version=version,
            namespace=self.namespace,
            selector=self.selector,
            timeout=self.watch_timeout,
            on_open=lambda response: setattr(self, "_response", response),
        )
        for event in events:
            obj = event["object"]
            version = obj["metadata"].get("resourceVersion", version)
            if event["type"] != "BOOKMARK":
                self.apply(event["type"], obj)
            if stop.is_set():
                break
        return version

    def apply(self, kind: str, obj: JSON) -> None:
        # managedFields are a quarter of a cached pod and nothing here reads them (client-go
        # strips them too).
        obj["metadata"].pop("managedFields", None)
        key = object_key(obj)
        with self._lock:
            if kind != "DELETED" and _older(obj, than=self._objects.get(key)):
                return  # a watch event behind a write we already cached
            old = self._objects.pop(key, None)
            if old is not None and self.index:
                for value in self.index(old):
                    self._indexed.get(value, {}).pop(key, None)
            if kind != "DELETED":
                self._objects[key] = obj
                if self.index:
                    for value in self.index(obj):
                        self._indexed.setdefault(value, {})[key] = obj
        self.on_event(kind, obj)


def _older(obj: JSON, *, than: JSON | None) -> bool:
    """Whether `obj` is an older version than `than` (etcd revisions compare as integers)."""
    if than is None:
        return False
    new, current = (
        obj["metadata"].get("resourceVersion", ""),
        than["metadata"].get("resourceVersion", ""),
    )
    return new.isdigit() and current.isdigit() and int(new) < int(current)
