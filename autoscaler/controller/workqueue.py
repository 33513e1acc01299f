"""A work queue keyed by job, with client-go's guarantees.

A key is processed by one worker at a time; adding a key that is queued is a no-op; adding a key
that is being processed queues it again once `done`. Failed keys come back after an exponential
delay, and `add_after` schedules a key for later (deadlines, TTLs). With `metrics`, it counts and
times what client-go's queue does, under the same names.
"""

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

from autoscaler.observability.metrics import WorkQueueMetrics

Key = Hashable


class ShutDownError(Exception):
    """The queue was shut down: workers should return."""


class WorkQueue:
    def __init__(
        self,
        *,
        base_delay: float = 0.05,
        max_delay: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: WorkQueueMetrics | None = None,
    ) -> None:
        self._clock, self._metrics = clock, metrics
        self._added: dict[Key, float] = {}  # when each queued key was added (queue_duration)
        self._started: dict[Key, float] = {}  # when each key being processed was taken
        self._base, self._max = base_delay, max_delay
        self._queue: deque[Key] = deque()
        self._dirty: set[Key] = set()
        self._processing: set[Key] = set()
        self._later: list[tuple[float, int, Key]] = []
        self._failures: dict[Key, int] = {}
        self._counter = 0
        self._shutdown = False
        self._cond = threading.Condition()
        if metrics is not None:
            metrics.unfinished_work.set_function(lambda: sum(self._running_for()))
            metrics.longest_running.set_function(lambda: max(self._running_for(), default=0.0))

    def _running_for(self) -> list[float]:
        """How long each key being processed has been (client-go's in-progress gauges)."""
        now = self._clock()
        with self._cond:
            return [now - started for started in self._started.values()]

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._later)

    def idle(self) -> bool:
        """No key queued, scheduled or being processed."""
        with self._cond:
            return not (self._queue or self._later or self._processing)

    def add(self, key: Key) -> None:
        with self._cond:
            self._add(key)

    def _add(self, key: Key) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        self._added.setdefault(key, self._clock())
        if self._metrics is not None:
            self._metrics.adds.inc()
            self._metrics.depth.set(len(self._dirty))
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            self._counter += 1
            heapq.heappush(self._later, (self._clock() + delay, self._counter, key))
            self._cond.notify()

    def retry(self, key: Key) -> float:
        """Queue a failed key after an exponential delay; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = float(min(self._base * 2**failures, self._max))
        if self._metrics is not None:
            self._metrics.retries.inc()
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self, *, timeout: float | None = None) -> Key | None:
        """The next key, marked as processing; None on timeout. Raises when shut down."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._move_due()
                if self._shutdown:
                    raise ShutDownError
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    self._taken(key)
                    return key
                wait = self._wait_time(deadline)
                if wait is not None and wait <= 0:
                    return None
                self._cond.wait(wait)

    def _taken(self, key: Key) -> None:
        now = self._clock()
        self._started[key] = now
        added = self._added.pop(key, now)
        if self._metrics is not None:
            self._metrics.depth.set(len(self._dirty))
            self._metrics.queue_duration.observe(now - added)

    def _move_due(self) -> None:
        now = self._clock()
        while self._later and self._later[0][0] <= now:
            self._add(heapq.heappop(self._later)[2])

    def _wait_time(self, deadline: float | None) -> float | None:
        candidates = [
            t - self._clock()
            for t in (deadline, self._later[0][0] if self._later else None)
            if t is not None
        ]
        return min(candidates) if candidates else None

    def done(self, key: Key) -> None:
        with self._cond:
            self._processing.discard(key)
            started = self._started.pop(key, None)
            if self._metrics is not None and started is not None:
                self._metrics.work_duration.observe(self._clock() - started)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
