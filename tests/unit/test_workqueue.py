"""The work queue's guarantees, with an injected clock."""

import pytest

from autoscaler.controller.workqueue import ShutDownError, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_queued_key_is_not_queued_twice() -> None:
    queue = WorkQueue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert [queue.get(timeout=0), queue.get(timeout=0), queue.get(timeout=0)] == ["a", "b", None]


def test_a_key_added_while_processing_comes_back_after_done() -> None:
    queue = WorkQueue()
    queue.add("a")
    key = queue.get(timeout=0)
    queue.add("a")  # e.g. a watch event during the reconcile
    assert queue.get(timeout=0) is None  # one worker at a time per key
    queue.done(key)
    assert queue.get(timeout=0) == "a"


def test_add_after_waits_for_the_clock() -> None:
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add_after("later", 5.0)
    assert queue.get(timeout=0) is None
    clock.now = 5.0
    assert queue.get(timeout=0) == "later"


def test_retries_back_off_exponentially_until_forgotten() -> None:
    queue = WorkQueue(base_delay=0.1, max_delay=0.3, clock=Clock())
    assert [queue.retry("k") for _ in range(4)] == [0.1, 0.2, 0.3, 0.3]
    queue.forget("k")
    assert queue.retry("k") == 0.1


def test_shut_down_releases_workers() -> None:
    queue = WorkQueue()
    queue.shut_down()
    with pytest.raises(ShutDownError):
        queue.get(timeout=1)


def test_idle_only_when_nothing_is_queued_scheduled_or_processing() -> None:
    clock = Clock()
    queue = WorkQueue(clock=clock)
    assert queue.idle()
    queue.add_after("a", 1.0)
    assert not queue.idle()
    clock.now = 1.0
    key = queue.get(timeout=0)
    assert not queue.idle()
    queue.done(key)
    assert queue.idle()
