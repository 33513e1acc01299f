"""Events sent off the reconcile path, as client-go's event broadcaster does.

A reconcile pass hands events to a bounded queue and moves on; one thread sends them. Events are
best effort: when the queue is full (an API server in trouble) new ones are dropped and counted.
"""

import logging
import queue
import threading
from typing import Any

from autoscaler.clients.kube import Kube

JSON = dict[str, Any]
log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, kube: Kube, *, capacity: int = 10_000) -> None:
        self.kube = kube
        self.dropped = 0
        self._pending: queue.Queue[JSON | None] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._send, name="events", daemon=True)
        self._thread.start()

    def record(self, event: JSON) -> None:
        try:
            self._pending.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def idle(self) -> bool:
        return self._pending.unfinished_tasks == 0

    def close(self, *, timeout: float = 5.0) -> None:
        """Send what is queued (within `timeout`), then stop the sender."""
        try:
            self._pending.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout=timeout)

    def _send(self) -> None:
        while (event := self._pending.get()) is not None:
            try:
                self.kube.create(event)
            except Exception as error:  # best effort: a lost event must never stop the others
                log.warning("could not record event %s: %s", event.get("reason"), error)
            finally:
                self._pending.task_done()
        self._pending.task_done()
