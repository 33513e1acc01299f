"""A work queue keyed by job, with client-go's guarantees.

A key is processed by one worker at a time; adding a key that is queued is a no-op; adding a key
that is being processed queues it again once `done`. Failed keys come back after an exponential
delay, and `add_after` schedules a key for later (deadlines, TTLs).
"""

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

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
    ) -> None:
        self._clock = clock
        self._base, self._max = base_delay, max_delay
        self._queue: deque[Key] = deque()
        self._dirty: set[Key] = set()
        self._processing: set[Key] = set()
        self._later: list[tuple[float, int, Key]] = []
        self._failures: dict[Key, int] = {}
        self._counter = 0
        self._shutdown = False
        self._cond = threading.Condition()

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
                    return key
                wait = self._wait_time(deadline)
                if wait is not None and wait <= 0:
                    return None
                self._cond.wait(wait)

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
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
