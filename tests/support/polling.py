"""Condition polling for tests and benchmarks: no fixed sleeps, a clear message on timeout."""

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.1, what: str
) -> Any:
    """The first truthy value of `predicate`, polled every `interval` s until `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
