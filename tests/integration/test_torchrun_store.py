"""Why elastic pods get TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: without it, a torchrun agent that
joins a running job hangs and then takes the job down; with it, the world grows.

Two agents on loopback, the second started once the first trains (a scale-up), with and without
the variable, side by side. The rendezvous read timeout is cut to 15 s so the hang ends soon.
Real torchrun and no cluster: the integration tier, which has the PyTorch environment's fixture.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.torchrun import DISABLE_SHARED_STORE
from tests.support.controlplane import REPO_ROOT
from tests.support.fixtures import EXAMPLE
from tests.support.polling import wait_for
from tests.support.processes import free_port, stop_process

READ_TIMEOUT = 15


class Agents:
    """torchrun agents of one job (1..2 nodes) on loopback, the first hosting the rendezvous."""

    def __init__(self, torch_env: Path, workdir: Path, *, share_store: bool) -> None:
        self.workdir, self.port = workdir, free_port()
        workdir.mkdir()
        self.env = {
            "PATH": f"{torch_env / 'bin'}:/usr/bin:/bin",
            "PYTHONPATH": str(REPO_ROOT),
            "AUTOSCALER_NAMESPACE": "loopback",
            "AUTOSCALER_JOB_NAME": workdir.name,
        }
        if not share_store:  # what the operator sets in every elastic pod
            self.env[DISABLE_SHARED_STORE["name"]] = DISABLE_SHARED_STORE["value"]
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        is_host = int(not self.procs)
        conf = f"is_host={is_host},last_call_timeout=1,read_timeout={READ_TIMEOUT}"
        argv = [
            "torchrun", "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{self.port}", f"--rdzv-conf={conf}", "--max-restarts=3",
            str(EXAMPLE / "train.py"), f"--checkpoint-dir={self.workdir / 'checkpoints'}",
            f"--events={self.workdir / 'events.jsonl'}", "--metrics-port=0",
        ]  # fmt: skip
        with (self.workdir / f"agent-{len(self.procs)}.log").open("wb") as log:
            self.procs.append(
                subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
            )

    def worlds(self) -> set[int]:
        path = self.workdir / "events.jsonl"
        text = path.read_text() if path.exists() else ""
        return {int(line.split('"world": ')[1].split(",")[0]) for line in text.splitlines()}

    def log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("*.log")))

    def stop(self) -> None:
        """SIGTERM first: torchrun then stops its workers, each in a session of its own, which
        a SIGKILL of the agent left running (found after an interrupted run)."""
        for proc in self.procs:
            stop_process(proc)


@pytest.fixture
def pair(torch_env: Path, tmp_path: Path) -> Iterator[tuple[Agents, Agents]]:
    shared = Agents(torch_env, tmp_path / "shared-store", share_store=True)
    fixed = Agents(torch_env, tmp_path / "store-per-round", share_store=False)
    yield shared, fixed
    shared.stop()
    fixed.stop()


def test_a_joining_agent_hangs_the_shared_store_and_not_a_store_per_round(
    pair: tuple[Agents, Agents],
) -> None:
    shared, fixed = pair
    for agents in pair:
        agents.start()
    wait_for(lambda: all(a.worlds() == {1} for a in pair), timeout=60, what="worlds of 1")
    joined = time.monotonic()
    for agents in pair:
        agents.start()
    wait_for(lambda: 2 in fixed.worlds(), timeout=60, what="a world of 2 with a store per round")
    wait_for(
        lambda: all(p.poll() is not None for p in shared.procs),
        timeout=READ_TIMEOUT * 3,
        what="the shared-store agents to give up",
    )
    assert 2 not in shared.worlds()
    assert [p.returncode for p in shared.procs] == [1, 1]
    assert "MASTER_ADDR" in shared.log()  # the joining agent waited for the new round's address
    assert all(p.poll() is None for p in fixed.procs)
    print(f"\nshared store: the job ended {time.monotonic() - joined:.0f} s after the join")
