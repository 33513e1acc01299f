"""The torchft path of goodput with real torchft: two replica groups of the torchft example on
loopback, with goodput on, around a real lighthouse, one group joining and then leaving.

Each quorum change makes every group choose the batch again for the participants, live; the
groups must agree on it at every step (they fit the same model from the same averaged step
times), the learning rate must follow AdaScale at every committed step, the noise scale must be
measured across the groups, and the job's progress in samples at B0 must be the sum of its steps'
B x E(B) and reach its work. The work declared is more than any run trains, and is cut once group
0 trains alone again, so that no machine is fast enough to finish it before the second group
joins. Real torchft and no cluster: the integration tier, which has the
PyTorch environment's fixture; the engine's side of a torchft job is in the e2e tier.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler import fault_tolerance as ft
from autoscaler.goodput.efficiency import GradientNoise, efficiency, gain
from autoscaler.training.adaptation import RECHOOSE_EVERY
from autoscaler.training.files import write_atomically
from tests.support.controlplane import REPO_ROOT
from tests.support.polling import wait_for
from tests.support.processes import free_port, stop_process

EXAMPLE = REPO_ROOT / "examples" / "torchft" / "train.py"
BASE = 128  # B0, also the example's batch per group
LEARNING_RATE = 0.01  # the example's rate for its batch, here B0's
WORK = 2_000_000  # samples at B0, declared: cut once the checks have their steps
MARGIN = 10 * BASE  # samples at B0 trained past the cut
ALONE_AGAIN = 5  # group 0's steps alone after group 1 left, before the cut
GOODPUT = [f"--base-batch={BASE}", "--max-local-batch=512", "--max-global-batch=2048"]
STOPPED_BY_SIGNAL = 128 + signal.SIGTERM  # the example's clean stop at a step boundary
TIMEOUT = 240  # each wait, with the rest of the integration tier beside it on two cores
Event = dict[str, Any]


class Groups:
    """The lighthouse and the replica groups of one torchft job on loopback."""

    def __init__(self, torch_env: Path, workdir: Path) -> None:
        self.workdir = workdir
        self.lighthouse = free_port()
        self.path = f"{torch_env / 'bin'}:/usr/bin:/bin"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start_lighthouse(self) -> None:
        argv = [
            ft.LIGHTHOUSE_COMMAND, f"--bind=127.0.0.1:{self.lighthouse}", "--min_replicas=1",
            f"--heartbeat_timeout_ms={ft.DEFAULT_HEARTBEAT_TIMEOUT_MS}",
            f"--join_timeout_ms={ft.DEFAULT_JOIN_TIMEOUT_MS}",
            f"--quorum_tick_ms={ft.DEFAULT_QUORUM_TICK_MS}",
        ]  # fmt: skip
        self._spawn("lighthouse", argv, {"PATH": self.path})

    def start_group(self, group: str) -> None:
        env = {
            "PATH": self.path,
            "PYTHONPATH": str(REPO_ROOT),
            "AUTOSCALER_NAMESPACE": "loopback",
            "AUTOSCALER_JOB_NAME": "torchft-goodput",
            ft.ENV_LIGHTHOUSE: f"http://127.0.0.1:{self.lighthouse}",
            ft.ENV_REPLICA_GROUP: group,
            ft.ENV_MIN_REPLICAS: "1",
            ft.ENV_POD_IP: "127.0.0.1",
            "MASTER_PORT": str(free_port()),
        }
        argv = [
            "python", str(EXAMPLE), f"--total-samples={WORK}", f"--work-file={self.work_file}",
            f"--batch-size={BASE}", f"--events={self.events(group)}", "--metrics-port=0",
            *GOODPUT,
        ]  # fmt: skip
        self._spawn(group, argv, env)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with (self.workdir / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
            )

    def commits(self, group: str) -> list[Event]:
        path = self.events(group)
        events = map(json.loads, path.read_text().splitlines()) if path.exists() else []
        return [e for e in events if e["event"] == "commit"]

    def events(self, group: str) -> Path:
        return self.workdir / f"events-{group}.jsonl"

    @property
    def work_file(self) -> Path:
        return self.workdir / "work"

    def cut_work(self, group: str) -> float:
        """Lowers the job's work to MARGIN past `group`'s progress; returns the new work."""
        total = float(self.commits(group)[-1]["progress"]) + MARGIN
        write_atomically(self.work_file, lambda file: file.write(f"{total}\n".encode()))
        return total

    def trained_with(
        self, group: str, participants: int, *, steps: int = 1, after: int = 0
    ) -> bool:
        """`group` committed `steps` steps with `participants` among its commits from `after`."""
        return steps <= sum(
            e["ok"] and e["participants"] == participants and not e["healing"]
            for e in self.commits(group)[after:]
        )

    def wait(self, predicate: Callable[[], object], *, what: str) -> None:
        try:
            wait_for(predicate, timeout=TIMEOUT, interval=0.5, what=what)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.log()}") from None

    def log(self) -> str:
        return "".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.workdir.glob("*.log"))
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_process(proc)


@pytest.fixture
def groups(torch_env: Path, tmp_path: Path) -> Iterator[Groups]:
    job = Groups(torch_env, tmp_path)
    yield job
    job.stop()


def test_torchft_groups_choose_the_batch_at_every_quorum_and_count_goodput_progress(
    groups: Groups,
) -> None:
    groups.start_lighthouse()
    groups.start_group("0")
    groups.wait(lambda: groups.trained_with("0", 1), what="group 0 training alone")
    groups.start_group("1")
    groups.wait(lambda: groups.trained_with("1", 2), what="both groups training")
    joined = len(groups.commits("1"))
    groups.wait(
        lambda: len(groups.commits("1")) >= joined + 2 * RECHOOSE_EVERY, what="two re-choices"
    )
    assert stop_process(groups.procs["1"]) == STOPPED_BY_SIGNAL, groups.log()
    left = len(groups.commits("0"))
    groups.wait(
        lambda: groups.trained_with("0", 1, steps=ALONE_AGAIN, after=left),
        what="group 0 training alone again",
    )
    work = groups.cut_work("0")
    groups.wait(lambda: groups.procs["0"].poll() is not None, what="group 0 finishing alone")
    assert groups.procs["0"].returncode == 0, groups.log()

    alone, both = groups.commits("0"), groups.commits("1")
    assert_same_batch_at_every_shared_step(alone, both)
    counted = assert_adascale_at_every_step(alone)
    last = alone[-1]
    assert last["phi"] is not None, last
    assert 0 < float(last["phi"]) < float("inf"), last
    assert float(last["progress"]) == pytest.approx(counted, rel=0.05)
    assert float(last["progress"]) >= work
    quorums = [e["participants"] for e in committed(alone)]
    assert 2 in quorums, quorums  # it trained with both groups,
    assert quorums[-1] == 1, quorums  # then alone


def committed(commits: list[Event]) -> list[Event]:
    """The steps the group took part in and applied, in order, once each."""
    steps = {int(e["step"]): e for e in commits if e["ok"] and not e["healing"]}
    return [steps[number] for number in sorted(steps)]


def assert_same_batch_at_every_shared_step(first: list[Event], second: list[Event]) -> None:
    """Both groups ran every step they shared at one global batch and learning rate."""
    theirs = {int(e["step"]): e for e in committed(second)}
    shared = [(e, theirs[int(e["step"])]) for e in committed(first) if int(e["step"]) in theirs]
    assert shared, "the groups shared no committed step"
    for mine, other in shared:
        assert (mine["global_batch"], mine["lr"]) == (other["global_batch"], other["lr"]), (
            mine,
            other,
        )


def assert_adascale_at_every_step(commits: list[Event]) -> float:
    """The learning rate at every committed step is B0's times AdaScale's gain at the step's
    batch and noise; returns the steps' B x E(B) summed (samples at B0)."""
    counted = 0.0
    for event in committed(commits):
        phi = event["phi"]
        noise = GradientNoise(0.0 if phi in (None, float("inf")) else float(phi), BASE)
        batch = int(event["global_batch"])
        assert float(event["lr"]) == pytest.approx(LEARNING_RATE * gain(noise, batch)), event
        counted += batch * efficiency(noise, batch)
    return counted
