"""A service's main thread sees SIGTERM even when the kernel hands it to another thread."""

import inspect
import math
import signal
import sys
import threading
from collections.abc import Iterator

import pytest

from autoscaler.clients.stopping import stopped_within
from tests.support.polling import wait_for

# Far beyond the poll (0.05 s): only a wait the handler never woke reaches it.
FALLBACK_SECONDS = 30.0


def blocking_line() -> int:
    """The line of `threading.Condition.wait` where a wait with a timeout blocks."""
    lines, first = inspect.getsourcelines(threading.Condition.wait)
    return first + next(
        i for i, line in enumerate(lines) if "= waiter.acquire(True, timeout)" in line
    )


def main_thread_waiting() -> bool:
    """Whether the main thread is blocked in a wait: past its last check for signals."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    return (
        frame is not None
        and frame.f_code is threading.Condition.wait.__code__
        and frame.f_lineno == blocking_line()
    )


@pytest.fixture
def stop_on_sigusr1() -> Iterator[threading.Event]:
    stop = threading.Event()
    before = signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    yield stop
    signal.signal(signal.SIGUSR1, before)


def test_a_signal_taken_by_another_thread_ends_the_wait(stop_on_sigusr1: threading.Event) -> None:
    stop = stop_on_sigusr1
    fell_back = threading.Event()

    def signal_this_thread_then_fall_back() -> None:
        wait_for(
            main_thread_waiting, what="the main thread in its wait"
        )  # a signal before it is seen
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # not the main thread
        if not stop.wait(FALLBACK_SECONDS):
            fell_back.set()
            stop.set()

    sender = threading.Thread(target=signal_this_thread_then_fall_back, daemon=True)
    sender.start()
    assert stopped_within(stop, FALLBACK_SECONDS * 2, poll=0.05)
    sender.join()
    assert not fell_back.is_set(), "the main thread ran the handler only once stop was set"


@pytest.mark.parametrize(
    ("seconds", "already_set", "expected"),
    [(0.1, True, True), (0.1, False, False), (math.inf, True, True)],
)
def test_the_wait_ends_at_its_deadline_or_at_once_when_stopped(
    seconds: float, already_set: bool, expected: bool
) -> None:
    stop = threading.Event()
    if already_set:
        stop.set()
    assert stopped_within(stop, seconds, poll=0.02) is expected
