"""The policy runners: each way a plug-in misbehaves, in a real worker process, with tiny budgets.

The plug-in is tests/support/misbehaving_policy.py, loaded by the worker through the registry
(by its path) exactly as `autoscaler engine` loads a file plug-in.
"""

import gc
import multiprocessing
import os
import pickle
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.engine.policy_runner import (
    PluginSpec,
    ProcessRunner,
    RunResult,
    ThreadRunner,
    resident_mb,
)
from autoscaler.engine.policy_runner import _plain_loads as plain_loads
from autoscaler.engine.policy_runner import _receive_uncollected as receive_uncollected
from autoscaler.policies.contract import Decision, Snapshot
from autoscaler.policies.registry import build, find
from tests.support import misbehaving_policy
from tests.support.memory_cluster import GPU, START

PLUGIN_FILE = Path(misbehaving_policy.__file__)
VIEW = Snapshot.model_validate(
    {
        "capacity": {GPU: 8.0},
        "jobs": [
            {
                "namespace": "ns",
                "name": "linear",
                "min_replicas": 1,
                "max_replicas": 8,
                "replicas": 1,
                "resources_per_replica": {GPU: 1.0},
                "throughput": {1: 100.0, 2: 200.0},
            }
        ],
    }
)
# Budgets: a decision on one job takes milliseconds; a worker loads in about a second alone, more
# with other tests running, hence the generous start budget (it is not what these tests measure).
TIMEOUT, START_TIMEOUT = 1.0, 60.0


def runner(
    *, timeout: float = TIMEOUT, max_memory_mb: float = 2048.0, **config: Any
) -> ProcessRunner:
    """A runner of the misbehaving plug-in with `config` (its behaviour and amounts)."""
    return ProcessRunner(
        PluginSpec.of(str(PLUGIN_FILE), {"restart_seconds": 0, **config}),
        name="misbehaving",
        timeout=timeout,
        max_memory_mb=max_memory_mb,
        start_timeout=START_TIMEOUT,
    )


@pytest.fixture
def running() -> Iterator[list[ProcessRunner]]:
    """Runners to close at the end, so no worker outlives its test."""
    made: list[ProcessRunner] = []
    yield made
    for one in made:
        one.close()


def started(made: list[ProcessRunner], **config: Any) -> ProcessRunner:
    made.append(runner(**config))
    return made[-1]


def call(one: ProcessRunner, rounds: int = 1) -> RunResult:
    result = RunResult()
    for i in range(rounds):
        result = one.decide(VIEW, now=START + timedelta(seconds=30 * i))
    return result


@pytest.mark.parametrize(
    ("behaviour", "fallback", "replaced"),
    [
        ("decide", "", False),
        ("raise", "PolicyFailed", False),  # the worker reported it: it stays
        ("invalid", "PolicyInvalid", False),
        ("exit", "PolicyFailed", True),  # dead: the engine saw EOF and starts another
        ("hang", "PolicyTimeout", True),  # killed at its budget
    ],
)
def test_each_failure_keeps_every_count_with_its_reason(
    running: list[ProcessRunner], tmp_path: Path, behaviour: str, fallback: str, replaced: bool
) -> None:
    one = started(running, behaviour=behaviour)
    first = one.worker_pid
    result = call(one)
    assert result.fallback == fallback
    if fallback:
        assert result.decisions == ()
    else:
        assert [(d.name, d.replicas) for d in result.decisions] == [("linear", 4)]
    assert (one.worker_pid != first, one.replacements) == (replaced, int(replaced))
    assert result.replaced == (fallback if replaced else "")
    assert first is not None
    assert _alive(first) is not replaced


def test_a_hang_costs_one_round_then_a_fresh_worker_decides(
    running: list[ProcessRunner], tmp_path: Path
) -> None:
    one = started(running, behaviour="hang", hang_once_file=str(tmp_path / "hung"))
    assert call(one).fallback == "PolicyTimeout"
    second = call(one)
    assert (second.fallback, [d.replicas for d in second.decisions]) == ("", [4])
    assert one.replacements == 1


def test_a_leaking_worker_is_recycled_and_stays_under_its_limit(
    running: list[ProcessRunner], tmp_path: Path
) -> None:
    probe = started(running)
    call(probe)  # loaded and decided once: the worker's resting size
    base = resident_mb(probe.worker_pid)
    assert base is not None
    limit = base + 120  # room for two 50 MB leaks, not three
    one = started(running, behaviour="leak", leak_mb=50, max_memory_mb=limit)
    sizes, replaced = [], []
    for i in range(6):
        result = one.decide(VIEW, now=START + timedelta(seconds=30 * i))
        replaced += [result.replaced] if result.replaced else []
        if i % 3 == 2:  # over the limit: killed mid-call, or replaced once it has answered
            assert result.fallback in {"", "PolicyOutOfMemory"}
        else:
            assert (result.fallback, [d.replicas for d in result.decisions]) == ("", [4])
        sizes.append(resident_mb(one.worker_pid))
    assert one.replacements == 2, sizes  # the 3rd and 6th calls passed the limit
    assert replaced == ["PolicyOutOfMemory"] * 2
    assert all(size is not None and size <= limit for size in sizes), (limit, sizes)


def test_a_call_that_bloats_is_killed_before_its_time_is_up(
    running: list[ProcessRunner], tmp_path: Path
) -> None:
    one = started(running, behaviour="bloat", leak_mb=300, max_memory_mb=250.0, timeout=30.0)
    result = one.decide(VIEW, now=START)
    assert (result.fallback, one.replacements) == ("PolicyOutOfMemory", 1)


def test_a_plug_in_that_fails_to_build_in_its_worker_falls_back(
    running: list[ProcessRunner], tmp_path: Path
) -> None:
    one = started(running, behaviour="no-such-behaviour")
    assert call(one).fallback == "PolicyFailed"
    assert one.replacements == 1


def test_close_ends_the_worker() -> None:
    one = runner()
    pid = one.worker_pid
    assert pid is not None
    assert _alive(pid)
    one.close()
    assert not _alive(pid)


def test_the_thread_runner_gives_the_same_results_in_process() -> None:
    policy = build(find(str(PLUGIN_FILE)), {"restart_seconds": 0})
    one = ThreadRunner(policy, name="misbehaving", timeout=TIMEOUT)
    try:
        result = one.decide(VIEW, now=START)
    finally:
        one.close()
    assert [(d.name, d.replicas, d.reason) for d in result.decisions] == [
        ("linear", 4, "OptimalAllocation")
    ]


def test_a_relative_file_reference_is_made_absolute_for_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(PLUGIN_FILE.parent)
    spec = PluginSpec.of(PLUGIN_FILE.name, {"behaviour": "raise"})
    assert spec == PluginSpec(reference=str(PLUGIN_FILE), config={"behaviour": "raise"})
    assert PluginSpec.of("global-optimizer", {}).reference == "global-optimizer"


def test_a_worker_imports_nothing_from_its_working_directory(
    running: list[ProcessRunner], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker boots with `python -c`, which would put its working directory first on
    sys.path while it imports multiprocessing: a package there must not run."""
    shadow = tmp_path / "multiprocessing"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('imported from the working directory')")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    one = started(running)
    assert (call(one).fallback, one.replacements) == ("", 0)
    assert "PYTHONSAFEPATH" not in os.environ  # set only while the worker started


def test_a_worker_reply_can_name_no_class() -> None:
    """Unpickling a class would import its module from anywhere on sys.path (the working
    directory included): the engine reads the worker's replies as builtins only."""
    row = ("ns", "job", 2, "Why", "message")
    assert plain_loads(pickle.dumps(("ok", [row]))) == ("ok", [row])
    for foreign in (Path("x"), Decision(*row), ("ok", [("ns", "job", 2, Reason("W"), "m")])):
        with pytest.raises(pickle.UnpicklingError, match="may not name"):
            plain_loads(pickle.dumps(foreign))


def test_a_snapshot_crosses_the_process_boundary_intact() -> None:
    big = Snapshot.model_validate(
        {
            "capacity": {GPU: 10_000.0},
            "jobs": [
                {
                    "namespace": "ns",
                    "name": f"job-{i}",
                    "min_replicas": 1,
                    "max_replicas": 8,
                    "replicas": 2,
                    "throughput": {1: 100.0, 2: 190.0},
                    "throughput_age_seconds": {1: 30.0},
                }
                for i in range(500)
            ],
        }
    )
    assert pickle.loads(pickle.dumps(big)) == big


class Reason(str):
    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return resident_mb(pid) is not None  # a zombie has no VmRSS


class Cell:
    """A tracked object: enough of them start a collection."""


def test_a_worker_unpickles_a_request_with_no_collection() -> None:
    request = [Cell() for _ in range(20 * gc.get_threshold()[0])]
    ours, theirs = multiprocessing.Pipe()
    ours.send(request)
    collections: list[str] = []

    def collecting(phase: str, _: dict[str, int]) -> None:
        collections.append(phase)

    gc.callbacks.append(collecting)
    try:
        received = receive_uncollected(theirs)
    finally:
        gc.callbacks.remove(collecting)
        ours.close()
        theirs.close()
    assert len(received) == len(request)
    assert collections == []
    assert gc.isenabled()
