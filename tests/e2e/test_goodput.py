"""A goodput job, end to end: the e2e example with `--base-batch` as a torchrun PyTorchJob on the
real control plane, grown from 1 to 2 workers by the engine, which prices it by goodput from the
gauges the job exports. It checks that the batch the job runs in the last rounds at 2 workers
has (in the median) at least 0.95 of the goodput of the batch the engine priced there, the job's
noise scale against an offline estimate from independent base-batch gradients at its weights
over the stretch its estimate covers (within 25 %), that the global batch chosen at 2 workers is
no smaller than at 1 and the learning rate follows AdaScale, that the progress in samples at B0
matches the sum of its steps' B x E(B) (within 5 %), and that it succeeds once it has trained
its declared statistical work (declared larger than any run trains, then cut as every scenario
cuts it once the engine has priced enough rounds at 2 workers)."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from autoscaler import metrics_contract as mc
from autoscaler.goodput.efficiency import GradientNoise, efficiency, gain
from autoscaler.observability.decision_log import read_decision_log
from autoscaler.training.adaptation import RECHOOSE_EVERY
from tests.e2e.training import Scenario, TrainingJob, wait_stepping, wait_succeeded
from tests.support.controlplane import REPO_ROOT
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(900)
BASE = 64
# Samples at B0, more than a run trains on any machine: the engine grows the job after its settle
# whatever its speed, and the work is cut once the checks at 2 workers have their steps.
WORK = 2_000_000
LEARNING_RATE = 0.01 * BASE / 128  # the example's rate for B0
LAST_ROUNDS = 5  # of the engine's, 2 s apart
ROUNDS_AT_TWO = 3 * LAST_ROUNDS  # the engine's rounds at 2 workers before the work is cut
STEPS_AT_TWO = 4 * RECHOOSE_EVERY  # ... and the job's steps there: several re-choices
GOODPUT = ["--base-batch=64", "--max-local-batch=256", "--max-global-batch=2048"]
# The offline estimate computes its gradients at each checkpoint's weights, so checkpoints close
# together keep it near the weights the job measured at; its cost is per sample, not checkpoint.
CHECKPOINTS = ["--checkpoint-every=10"]


def goodput_manifest(job: TrainingJob) -> dict[str, object]:
    manifest = job.manifest(replicas=1, low=1, high=2, total_samples=WORK)
    container = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    container["containers"][0]["command"] += GOODPUT + CHECKPOINTS
    return manifest


def priced_at_two(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine's rounds at 2 workers that priced the batch the job reported running."""
    return [
        r
        for r in records
        if r["name"] == "goodput"
        and r["replicas_before"] == 2
        and r["goodput"]
        and r["goodput"]["running"]
    ]


def settled_at_two(job: TrainingJob, decisions: Path) -> bool:
    try:
        rounds = len(priced_at_two(read_decision_log(decisions)))
    except ValueError:  # a line being written
        return False
    return rounds >= ROUNDS_AT_TWO and len(rank0_steps(job, 2)) >= STEPS_AT_TWO


def rank0_steps(job: TrainingJob, world: int) -> list[dict[str, object]]:
    return [
        e for e in job.events() if e["event"] == "step" and e["rank"] == 0 and e["world"] == world
    ]


class Snapshots:
    """Copies of the job's checkpoint as it is rewritten, for the offline estimate along the
    run (the checkpoint is replaced atomically, so each copy is whole)."""

    def __init__(self, job: TrainingJob) -> None:
        self.source = job.workdir / "checkpoints" / "checkpoint.pt"
        self.directory = job.workdir / "snapshots"
        self.directory.mkdir()
        self.copies: list[Path] = []
        self._seen = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                changed = self.source.stat().st_mtime
                if changed != self._seen:
                    copy = self.directory / f"{len(self.copies):05d}.pt"
                    shutil.copyfile(self.source, copy)
                    self._seen = changed
                    self.copies.append(copy)
            except FileNotFoundError:
                continue

    def stop(self) -> list[Path]:
        self._stop.set()
        self._thread.join()
        return self.copies


def test_a_goodput_job_measures_its_noise_adapts_and_finishes_its_work(
    scenario: Scenario, torch_env: Path
) -> None:
    scenario.nodes(2, gpus=4)  # room to spread its 2 workers: the planned placement packs them
    job = scenario.job("goodput")
    job.create(goodput_manifest(job))
    snapshots = Snapshots(job)
    with scenario.engine():
        wait_stepping(job, 1, timeout=300)
        wait_stepping(job, 2, timeout=300)
        selector = f'{{{mc.LABEL_JOB_NAME}="goodput"}}'
        phi_series = scenario.prometheus.wait_for_series(
            mc.GRADIENT_NOISE_SCALE + selector, timeout=120
        )
        decisions = scenario.workdir / "decisions.jsonl"
        wait_for(lambda: settled_at_two(job, decisions), timeout=300, interval=1,
                 what="the engine's rounds and the job's steps at 2 workers")  # fmt: skip
        job.cut_work()
        wait_succeeded(job, timeout=600)
    copies = snapshots.stop()

    one, two = rank0_steps(job, 1), rank0_steps(job, 2)
    records = [
        r for r in read_decision_log(scenario.workdir / "decisions.jsonl") if r["name"] == "goodput"
    ]
    written = [r for r in records if r["written"]]
    # Grown to 2 and kept there; or, where its readings priced 1 worker above 2 by goodput (two
    # workers on the two shared cores gained 1.1x in one run), shrunk once by the policy and
    # grown back: every write the policy's, priced by goodput.
    assert [r["replicas"] for r in written] in ([2], [2, 1, 2]), written
    assert all(r["goodput"] and r["reason"] == "OptimalAllocation" for r in written), written
    # Each round at 2 workers: the engine's best batch there against the batch the job reported
    # running, both priced by the engine's model. The job re-chooses its batch every 20 steps as
    # its estimate and step times move: the last rounds are past the first re-choices there.
    shares = [r["goodput"]["running"]["share_of_goodput"] for r in priced_at_two(records)]
    growth = next(r for r in records if r["written"])
    print(f"grown by {'goodput' if growth['goodput'] else 'throughput'}; the job's goodput over")
    print(f"the engine's price at 2 workers, by round: {shares}")
    assert len(shares) >= LAST_ROUNDS
    assert statistics.median(shares[-LAST_ROUNDS:]) >= 0.95  # it re-chooses for a 5 % gain
    assert max(int(e["global_batch"]) for e in two) >= int(one[-1]["global_batch"])
    for event in one + two:  # AdaScale: the base rate times the step's gain
        if event["phi"] is not None and event["phi"] != float("inf"):
            noise = GradientNoise(float(event["phi"]), BASE)
            expected = LEARNING_RATE * gain(noise, int(event["global_batch"]))
            assert float(event["lr"]) == pytest.approx(expected, rel=1e-6)

    steps = sorted(one + two, key=lambda e: int(e["step"]))
    counted = 0.0
    for event in {int(e["step"]): e for e in steps}.values():
        phi = event["phi"]
        noise = GradientNoise(0.0 if phi in (None, float("inf")) else float(phi), BASE)
        batch = int(event["global_batch"])
        counted += batch * efficiency(noise, batch)
    final = float(steps[-1]["progress"])
    assert final == pytest.approx(counted, rel=0.05)
    assert job.declared is not None
    assert final >= job.declared

    measured = float(phi_series[0]["value"][1])
    assert measured > 0
    out = subprocess.run(
        [
            str(torch_env / "bin" / "python"),
            "-m",
            "benchmarks.goodput_phi",
            str(BASE),
            *map(str, copies),
        ],
        env={"PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    print(out.stdout, f"(the job gauge read during training: {measured:.1f})")
    assert out.returncode == 0, out.stdout + out.stderr
