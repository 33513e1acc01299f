"""bench-scale's operator process: the pure helpers behind its answers, and how its proxy fails
when the child misbehaves (real child processes, stand-ins for the operator: each fails or hangs
in one way, and the proxy must raise a clear error, never hang)."""

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest

from benchmarks.operator_process import (
    OperatorDiedError,
    OperatorProcess,
    jobs_with_active_worker,
    pending_pod_names,
)

JSON = dict[str, Any]
DELETING = {"deletionTimestamp": "2026-01-01T00:00:00Z"}


def _pod(name: str, phase: str | None, **metadata: Any) -> JSON:
    return {"metadata": {"name": name, **metadata}, "status": {"phase": phase} if phase else {}}


@pytest.mark.parametrize(
    ("pod", "pending"),
    [
        (_pod("p", "Pending"), True),
        (_pod("p", None), True),  # no phase written yet
        ({"metadata": {"name": "p"}}, True),  # no status at all
        (_pod("p", "Running"), False),
        (_pod("p", "Succeeded"), False),
        (_pod("p", "Failed"), False),
        (_pod("p", "Pending", **DELETING), False),  # going away: never marked Running
    ],
)
def test_pending_pod_names(pod: JSON, pending: bool) -> None:
    assert pending_pod_names([pod]) == (["p"] if pending else [])


def test_pending_pod_names_keep_the_cache_order() -> None:
    pods = [_pod("b", "Pending"), _pod("a", "Running"), _pod("c", None)]
    assert pending_pod_names(pods) == ["b", "c"]


def _job(status: JSON | None) -> JSON:
    return {"metadata": {"name": "j"}, **({"status": status} if status is not None else {})}


@pytest.mark.parametrize(
    ("status", "active"),
    [
        (None, False),
        ({}, False),
        ({"replicaStatuses": None}, False),
        ({"replicaStatuses": {"Worker": {}}}, False),
        ({"replicaStatuses": {"Worker": {"active": 0}}}, False),
        ({"replicaStatuses": {"Master": {"active": 1}}}, False),  # workers only
        ({"replicaStatuses": {"Worker": {"active": 1}}}, True),
        ({"replicaStatuses": {"Worker": {"active": 3}}}, True),
    ],
)
def test_jobs_with_active_worker(status: JSON | None, active: bool) -> None:
    assert jobs_with_active_worker([_job(status)]) == int(active)


# -- stand-ins for the child (module level: a spawned child imports them by name) -----------------


def _answers(conn: Connection) -> None:
    """Ready at once; answers `jobs_active` with 7, fails anything else; stops when asked."""
    conn.send(("ok", None))
    while True:
        command, _ = conn.recv()
        if command == "stop":
            conn.send(("ok", None))
            return
        conn.send(("ok", 7) if command == "jobs_active" else ("error", "Traceback: boom"))


def _dies_at_start(conn: Connection) -> None:
    os._exit(3)


def _dies_when_asked(conn: Connection) -> None:
    conn.send(("ok", None))
    conn.recv()
    os._exit(4)


def _hangs(conn: Connection) -> None:
    time.sleep(3600)


Start = Callable[..., OperatorProcess]


@pytest.fixture
def started() -> Iterator[Start]:
    """Start a stand-in; every one started is closed at the end, so none outlives its test."""
    made: list[OperatorProcess] = []

    def start(target: Callable[..., None], **limits: float) -> OperatorProcess:
        made.append(OperatorProcess(target, **limits))
        return made[-1]

    yield start
    for one in made:
        one.close()


def _no_child_left() -> bool:
    return not [p for p in multiprocessing.active_children() if p.name == "operator"]


def test_answers_come_back_and_close_stops_the_child(started: Start) -> None:
    op = started(_answers)
    assert op.jobs_active() == 7
    op.close()
    assert op._process.exitcode == 0  # stopped when asked, not killed


def test_a_failed_question_raises_with_the_childs_traceback(started: Start) -> None:
    op = started(_answers)
    with pytest.raises(RuntimeError, match="failed pending_pods:\nTraceback: boom"):
        op.pending_pods()
    assert op.jobs_active() == 7  # the child goes on answering


def test_a_child_that_dies_at_start_is_an_error() -> None:
    with pytest.raises(OperatorDiedError, match=r"during starting .* \(exit code 3\)"):
        OperatorProcess(_dies_at_start)
    assert _no_child_left()


def test_a_child_that_dies_mid_question_is_an_error(started: Start) -> None:
    op = started(_dies_when_asked)
    with pytest.raises(OperatorDiedError, match=r"during wait_quiet \(exit code 4\)"):
        op.wait_quiet(quiet=1.0, timeout=600.0)
    op.close()  # nothing left to stop: returns at once
    assert op._process.exitcode == 4


def test_a_child_that_never_answers_times_out_and_is_killed() -> None:
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="did not answer starting"):
        OperatorProcess(_hangs, start_seconds=2.0, stop_seconds=0.5)
    assert time.monotonic() - began < 60  # a spawn's imports, the budgets, the kill
    assert _no_child_left()
