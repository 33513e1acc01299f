"""A namespace's objects of one kind as the API server changes them, timed when each change
arrives: a watch, since polling would see every change late and load the shared CPUs."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

from autoscaler.clients.kube import Kube, Resource

JSON = dict[str, Any]


class ListWatch:
    """A thread that lists `resource` in `namespace` (None: the cluster's), then watches it, and
    lists again whenever the watch ends (its timeout, the API server restarting), until
    stopped: `on_list(items)` with every listing, `on_event(type, object)` with every change."""

    def __init__(
        self,
        api: client.ApiClient,
        resource: Resource,
        namespace: str | None,
        *,
        on_list: Callable[[list[JSON]], None],
        on_event: Callable[[str, JSON], None],
    ) -> None:
        self.api, self.resource, self.namespace = api, resource, namespace
        self.on_list, self.on_event = on_list, on_event
        self._stop = threading.Event()
        self._response: Any = None  # the open watch, shut down to stop it
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._response is not None:
            with contextlib.suppress(Exception):  # already closed
                self._response.shutdown()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        kube = Kube(self.api)
        while not self._stop.is_set():
            try:
                listing = kube.list(self.resource, namespace=self.namespace)
                self.on_list(listing["items"])
                rv = listing["metadata"]["resourceVersion"]
                for event in kube.watch(
                    self.resource,
                    resource_version=rv,
                    namespace=self.namespace,
                    timeout=30,
                    on_open=self._open,
                ):
                    self.on_event(event["type"], event["object"])
            except Exception:  # the watch ended or the API server is restarting: list again
                self._stop.wait(0.2)

    def _open(self, response: Any) -> None:
        self._response = response
        if self._stop.is_set():
            with contextlib.suppress(Exception):
                response.shutdown()
