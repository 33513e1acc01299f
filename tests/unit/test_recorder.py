"""The Event sender: off the caller's path, and after the writes its Events report on."""

import threading
from typing import Any

import pytest

from autoscaler.clients.recorder import EVENT_PATIENCE, EventRecorder, InFlight
from tests.support.polling import wait_for

JSON = dict[str, Any]


class SentEvents:
    """The part of `Kube` the recorder uses: each created Event is kept, in order."""

    def __init__(self) -> None:
        self.sent: list[JSON] = []

    def create(self, obj: JSON) -> JSON:
        self.sent.append(obj)
        return obj


class Waiting:
    """`InFlight.wait_idle`, noting each call and how long it was allowed to wait."""

    def __init__(self, writes: InFlight) -> None:
        self.writes, self.allowed = writes, list[float]()
        self.called = threading.Event()

    def __call__(self, seconds: float) -> bool:
        self.allowed.append(seconds)
        self.called.set()
        return self.writes.wait_idle(seconds)


def test_an_event_waits_until_the_writes_under_way_are_done() -> None:
    kube, writes = SentEvents(), InFlight()
    waiting = Waiting(writes)
    recorder = EventRecorder(kube, wait_turn=waiting)  # type: ignore[arg-type]
    with writes.one(), writes.one():
        recorder.record({"reason": "Rescaled"})
        assert waiting.called.wait(5)
        assert kube.sent == []
    wait_for(lambda: kube.sent, timeout=5, interval=0.01, what="the event after the writes")
    assert kube.sent == [{"reason": "Rescaled"}]
    assert 0 < waiting.allowed[0] <= EVENT_PATIENCE
    recorder.close()


def test_an_event_past_its_patience_goes_out_during_writes() -> None:
    """Writes that never pause (a round of thousands of rescales) delay an Event by at most
    EVENT_PATIENCE; one already that old waits no more."""
    kube, writes = SentEvents(), InFlight()
    times = iter([0.0, EVENT_PATIENCE + 1.0])  # recorded at 0, sent past its patience
    waiting = Waiting(writes)
    recorder = EventRecorder(kube, wait_turn=waiting, clock=lambda: next(times))  # type: ignore[arg-type]
    with writes.one():
        recorder.record({"reason": "Rescaled"})
        wait_for(lambda: kube.sent, timeout=5, interval=0.01, what="the overdue event")
    assert waiting.allowed == [0.0]
    recorder.close()


def test_without_a_turn_to_wait_for_events_go_out_at_once() -> None:
    kube = SentEvents()
    recorder = EventRecorder(kube)  # type: ignore[arg-type]
    recorder.record({"reason": "SuccessfulCreatePod"})
    wait_for(recorder.idle, timeout=5, interval=0.01, what="the event sent")
    assert kube.sent == [{"reason": "SuccessfulCreatePod"}]
    recorder.close()


def test_in_flight_is_idle_once_every_write_ended_even_a_failed_one() -> None:
    writes = InFlight()
    assert writes.wait_idle(0)
    with writes.one():
        with writes.one():
            assert not writes.wait_idle(0)
        assert not writes.wait_idle(0)
    with pytest.raises(RuntimeError), writes.one():
        raise RuntimeError("the write failed")
    assert writes.wait_idle(0)
