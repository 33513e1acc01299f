"""Waiting on a service's stop event from the main thread."""

import threading
import time


def stopped_within(stop: threading.Event, seconds: float, *, poll: float = 1.0) -> bool:
    """`stop.wait(seconds)`, waking every `poll` seconds: Python runs a signal's handler in the
    main thread only, and the kernel may hand the process's SIGTERM to another thread, which
    wakes no wait of the main thread (`tests/unit/test_stopping.py` sends one that way)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        stop.wait(min(poll, left))
    return True
