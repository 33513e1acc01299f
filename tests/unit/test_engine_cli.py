"""`autoscaler decide`, `policies` and `engine`'s configuration: output shape and bad input."""

import gc
import json
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from autoscaler.cli.engine_command import RoundHealth, round_collections, run_round
from autoscaler.engine.engine import Engine
from autoscaler.engine.report import RoundReport
from autoscaler.policies.contract import JobSnapshot, Snapshot
from tests.unit.test_cli import run

SNAPSHOT = Snapshot(
    capacity={"nvidia.com/gpu": 8},
    jobs=[
        JobSnapshot(
            namespace="a", name="linear", min_replicas=1, max_replicas=8, replicas=2,
            resources_per_replica={"nvidia.com/gpu": 1}, throughput={n: 100.0 * n for n in range(1, 9)},
        ),
        JobSnapshot(
            namespace="a", name="flat", min_replicas=1, max_replicas=8, replicas=4,
            resources_per_replica={"nvidia.com/gpu": 1}, throughput={n: 100.0 + n for n in range(1, 9)},
        ),
    ],
)  # fmt: skip


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(SNAPSHOT.model_dump_json())
    return path


def test_decide_prints_policy_objective_and_decisions(snapshot_file: Path) -> None:
    result = run("decide", "--snapshot", str(snapshot_file))
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert set(output) == {"policy", "objective", "solve_seconds", "settled", "decisions"}
    assert output["settled"] is False  # the engine's settle steps are not applied
    assert output["policy"] == "global-optimizer"
    counts = {d["name"]: d["replicas"] for d in output["decisions"]}
    assert counts == {"linear": 7, "flat": 1}
    # Σ E^-0.25 over expected remaining seconds E: no work declared or attained, so 600
    # worker-seconds left at the current per-worker rate (linear: E = 600 x 100 / T(7) = 600 / 7;
    # flat: E = 600 x 104 / 4 / T(1))
    expected = (600 / 7) ** -0.25 + (600 * 104 / 4 / 101) ** -0.25
    assert output["objective"] == pytest.approx(expected)
    assert set(output["decisions"][0]) == {"namespace", "name", "replicas", "reason", "message"}


def test_decide_with_a_policy_config(snapshot_file: Path, tmp_path: Path) -> None:
    config = tmp_path / "pollux.yaml"
    config.write_text("objective: {kind: power-mean, exponent: -1}\n")
    result = run("decide", "--snapshot", str(snapshot_file), "--config", str(config))
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    counts = {d["name"]: d["replicas"] for d in output["decisions"]}
    expected = sum(
        1 / (SNAPSHOT.jobs[i].throughput[n] / SNAPSHOT.jobs[i].throughput[1])
        for i, n in enumerate(counts.values())
    )
    assert output["objective"] == pytest.approx(expected)  # Σ s^p with p = -1, minimised


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "error: unknown policy 'nope'; installed: "),
        (
            ["--config", "CONFIG"],
            "error: policy 'global-optimizer': objektive: Extra inputs are not permitted",
        ),
        (["--snapshot", "BROKEN"], "error: "),
    ],
)
def test_decide_bad_input_exits_2_with_one_line(
    snapshot_file: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "config.yaml").write_text("objektive: {}\n")
    (tmp_path / "broken.json").write_text('{"jobs": [{"name": "x"}]}')
    replaced = [
        {"CONFIG": str(tmp_path / "config.yaml"), "BROKEN": str(tmp_path / "broken.json")}.get(a, a)
        for a in args
    ]
    result = run("decide", "--snapshot", str(snapshot_file), *replaced)
    assert result.returncode == 2
    assert result.stderr.startswith(message)
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_policies_lists_every_built_in_with_its_schema() -> None:
    result = run("policies", "-o", "json")
    assert result.returncode == 0, result.stderr
    listing = {item["name"]: item for item in json.loads(result.stdout)}
    assert {
        "global-optimizer",
        "speedup-optimizer",
        "optimus",
        "least-attained-service",
        "static",
        "equal-share",
    } <= set(listing)
    schema = listing["global-optimizer"]["config_schema"]
    assert schema["additionalProperties"] is False
    assert "objective" in schema["properties"]


def test_engine_rejects_a_bad_config_before_touching_a_cluster(tmp_path: Path) -> None:
    config = tmp_path / "engine.yaml"
    config.write_text("interval_seconds: 30\nsettle: {cooldown: 5}\n")
    result = run("engine", "--config", str(config), "--kubeconfig", str(tmp_path / "absent"))
    assert result.returncode == 2
    assert result.stderr == "error: settle.cooldown: Extra inputs are not permitted\n"


def test_the_leaders_health_follows_completed_rounds() -> None:
    now = [0.0]
    health = RoundHealth(interval=30, clock=lambda: now[0])
    now[0] = 90.0
    assert health.ok()  # three intervals without a round: still fine
    now[0] = 91.0
    assert not health.ok()  # API server down or a round stuck for longer
    health.beat()
    assert health.ok()
    short = RoundHealth(interval=1, clock=lambda: now[0])
    now[0] += 59
    assert short.ok()  # never less than a minute


def test_a_round_runs_without_collections_and_its_garbage_is_collected_before_freezing() -> None:
    class Node:
        other: "Node"

    kept = Node()
    try:
        with round_collections():
            dropped = Node()
            dropped.other = dropped  # a reference cycle: only the collector frees it
            gone = weakref.ref(dropped)
            del dropped
            allocated = [Node() for _ in range(10 * gc.get_threshold()[0])]  # would start one
            assert gone() is not None  # not collected during the round
            del allocated
        assert gone() is None  # collected after it, not frozen for good
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(kept)
    finally:
        gc.unfreeze()


def test_a_rounds_report_is_gone_before_the_collection_after_it() -> None:
    class OneRound:
        report: "weakref.ref[RoundReport] | None" = None

        def run_once(self, *, now: datetime) -> RoundReport:
            report = RoundReport(
                time=now, policy="p", snapshot=Snapshot(), solve_seconds=0.5, objective=0.0,
                fallback="PolicyTimeout",
            )  # fmt: skip
            self.report = weakref.ref(report)
            return report

    engine = OneRound()
    report_alive: list[bool] = []

    def collecting(phase: str, _: dict[str, int]) -> None:
        if phase == "start":
            report_alive.append(engine.report is not None and engine.report() is not None)

    gc.callbacks.append(collecting)
    try:
        tally = run_round(cast(Engine, engine), now=datetime(2026, 1, 1, tzinfo=UTC))
    finally:
        gc.callbacks.remove(collecting)
        gc.unfreeze()
    assert report_alive  # the collection after the round ran
    assert not any(report_alive)
    assert str(tally) == "0 jobs, 0 written, policy 0.500 s, fallback PolicyTimeout"
