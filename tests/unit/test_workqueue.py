"""The work queue's guarantees, with an injected clock."""

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.controller.workqueue import ShutDownError, WorkQueue
from autoscaler.observability.metrics import CONTROLLER, controller_runtime_metrics


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


def sample(registry: CollectorRegistry, name: str) -> float | None:
    labels = {"name": CONTROLLER, "controller": CONTROLLER}
    return registry.get_sample_value(name, labels)


def test_metrics_count_and_time_as_client_gos_queue() -> None:
    """client-go's semantics: an add of a queued key is no add; depth counts keys not yet taken;
    queue time runs from the first add to the take, work time from the take to `done`."""
    registry, clock = CollectorRegistry(), Clock()
    queue = WorkQueue(clock=clock, metrics=controller_runtime_metrics(registry).queue)
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert sample(registry, "workqueue_adds_total") == 2.0
    assert sample(registry, "workqueue_depth") == 2.0
    clock.now = 2.0
    key = queue.get(timeout=0)
    assert sample(registry, "workqueue_depth") == 1.0
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == 2.0
    clock.now = 5.0
    assert sample(registry, "workqueue_unfinished_work_seconds") == 3.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 3.0
    queue.retry(key)
    queue.done(key)
    assert sample(registry, "workqueue_work_duration_seconds_sum") == 3.0
    assert sample(registry, "workqueue_work_duration_seconds_count") == 1.0
    assert sample(registry, "workqueue_retries_total") == 1.0
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0.0
    assert sample(registry, "workqueue_adds_total") == 2.0  # a retry counts once it is due
    clock.now = 10.0
    assert queue.get(timeout=0) == "b"
    assert queue.get(timeout=0) == "a"
    assert sample(registry, "workqueue_adds_total") == 3.0
    assert sample(registry, "workqueue_depth") == 0.0
