"""Events sent off the reconcile path, as client-go's event broadcaster does.

A reconcile pass hands events to a bounded queue and moves on; one thread sends them. Events are
best effort: when the queue is full (an API server in trouble) new ones are dropped and counted.
A sender may be asked to wait its turn (`wait_turn`), e.g. until the writes it reports on are
done, so the API server serves those first.
"""

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from autoscaler.clients.kube import Kube

JSON = dict[str, Any]
log = logging.getLogger(__name__)
# The longest an Event waits for its turn: past it, it is sent whatever else is under way.
EVENT_PATIENCE = 10.0


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        *,
        capacity: int = 10_000,
        wait_turn: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`wait_turn(seconds)` blocks until an event may be sent or `seconds` have passed."""
        self.kube, self.clock = kube, clock
        self.dropped = 0
        self._wait_turn = wait_turn
        self._pending: queue.Queue[tuple[float, JSON] | None] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._send, name="events", daemon=True)
        self._thread.start()

    def record(self, event: JSON) -> None:
        try:
            self._pending.put_nowait((self.clock() + EVENT_PATIENCE, event))
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
        while (entry := self._pending.get()) is not None:
            deadline, event = entry
            try:
                if self._wait_turn is not None:
                    self._wait_turn(max(0.0, deadline - self.clock()))
                self.kube.create(event)
            except Exception as error:  # best effort: a lost event must never stop the others
                log.warning("could not record event %s: %s", event.get("reason"), error)
            finally:
                self._pending.task_done()
        self._pending.task_done()


class InFlight:
    """Requests under way, so something else can wait for a pause in them."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    @contextmanager
    def one(self) -> Iterator[None]:
        with self._changed:
            self._count += 1
        try:
            yield
        finally:
            with self._changed:
                self._count -= 1
                if not self._count:
                    self._changed.notify_all()

    def wait_idle(self, seconds: float) -> bool:
        """Until none is under way (True), or `seconds` have passed (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._count, timeout=seconds)
