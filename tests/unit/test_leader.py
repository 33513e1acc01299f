"""Who acts on the lease, as a table (client-go's rules), and two electors with skewed clocks."""

import copy
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from autoscaler.clients.kube import ConflictError, NotFoundError
from autoscaler.clients.leader import LeaderElector, LeaseTimings, lease_action, lease_record
from tests.support.clock import NOW


def lease(holder: str, *, renewed_ago: float, duration: int = 15) -> dict[str, Any]:
    renew = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration}
    }


@pytest.mark.parametrize(
    ("current", "seen_ago", "expected"),
    [
        (None, 0, "create"),
        (lease("me", renewed_ago=1), 0, "renew"),
        (lease("me", renewed_ago=60), 60, "renew"),  # still ours: renew, even late
        (lease("other", renewed_ago=1), 1, "wait"),
        (lease("other", renewed_ago=1), 14.9, "wait"),
        (lease("other", renewed_ago=1), 15, "acquire"),  # unchanged for a whole duration
        # the holder's stamp says an hour ago (its clock is behind): only our own clock counts
        (lease("other", renewed_ago=3600), 0, "wait"),
        (lease("", renewed_ago=1), 0, "acquire"),  # released by its holder at shutdown
        ({"spec": {}}, 0, "acquire"),
    ],
)
def test_lease_action(current: dict[str, Any] | None, seen_ago: float, expected: str) -> None:
    since = NOW - timedelta(seconds=seen_ago)
    assert lease_action(current, identity="me", now=NOW, since=since) == expected


class Leases:
    """One namespace's Leases with resourceVersion conflicts, as the API server keeps them."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}

    def get(self, _: object, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.stored:
            raise NotFoundError(name)
        return copy.deepcopy(self.stored[name])

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if name in self.stored:
            raise ConflictError(name)
        return self._store(body, version=1)

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        current = self.stored[body["metadata"]["name"]]
        version = current["metadata"]["resourceVersion"]
        if body["metadata"].get("resourceVersion") != version:
            raise ConflictError(body["metadata"]["name"])
        return self._store(body, version=int(version) + 1)

    def _store(self, body: dict[str, Any], *, version: int) -> dict[str, Any]:
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(version)
        self.stored[body["metadata"]["name"]] = body
        return body


@pytest.mark.parametrize("skew", [-30.0, 30.0])
def test_clocks_thirty_seconds_apart_never_give_two_leaders(skew: float) -> None:
    """The standby's clock is `skew` s off the leader's. It must not take the lease while the
    leader renews, and must take it within a duration and a retry once the leader stops. With
    the holder's stamp compared to the standby's clock, a clock 30 s ahead took a live lease at
    once, and one 30 s behind waited 30 s too long."""
    leases, timings = Leases(), LeaseTimings(lease_seconds=15, renew_deadline=10, retry_period=2)
    seconds = [0.0]

    def clock(offset: float) -> Any:
        return lambda: NOW + timedelta(seconds=seconds[0] + offset)

    electors = {
        name: LeaderElector(leases, namespace="ns", name="engine", identity=name, timings=timings,
                            clock=clock(offset))  # type: ignore[arg-type]
        for name, offset in (("leader", 0.0), ("standby", skew))
    }  # fmt: skip
    assert electors["leader"].try_once()
    for _ in range(60):  # two minutes of the leader renewing every retry
        seconds[0] += timings.retry_period
        assert electors["leader"].try_once()
        assert not electors["standby"].try_once()
    record = lease_record(leases.stored["engine"])
    stopped = seconds[0]
    while not electors["standby"].try_once():  # the leader is gone: nobody renews
        seconds[0] += timings.retry_period
        assert seconds[0] - stopped <= timings.lease_seconds + timings.retry_period
    assert lease_record(leases.stored["engine"]) != record
    assert leases.stored["engine"]["spec"]["holderIdentity"] == "standby"


class Unanswered(Leases):
    """Leases behind an API server that stops answering: requests block until `heal`."""

    def __init__(self) -> None:
        super().__init__()
        self.answering = threading.Event()
        self.answering.set()

    def get(self, resource: object, namespace: str, name: str) -> dict[str, Any]:
        self.answering.wait()
        return super().get(resource, namespace, name)


def test_a_leader_whose_requests_hang_gives_up_within_its_renew_deadline() -> None:
    """A partition leaves the renewal blocked in a request (30 s, retried by the client); the
    leader must still stop before a standby may take the lease (the lease duration)."""
    leases = Unanswered()
    timings = LeaseTimings(lease_seconds=1.5, renew_deadline=1.0, retry_period=0.05)
    elector = LeaderElector(leases, namespace="ns", name="engine", identity="me", timings=timings)  # type: ignore[arg-type]
    stop, lost = threading.Event(), threading.Event()
    elector.run(stop, on_lost=lost.set)
    assert elector.is_leader.is_set()
    leases.answering.clear()  # cut off: the next renewal hangs
    cut = time.monotonic()
    try:
        assert lost.wait(timeout=10)
        assert time.monotonic() - cut < timings.lease_seconds
        assert not elector.is_leader.is_set()
    finally:
        stop.set()
        leases.answering.set()
