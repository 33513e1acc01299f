"""The example plug-in (examples/policy-plugin) installed as a user would, then used every way.

pip builds and installs it offline into a temporary directory; the CLI finds it through the
entry-point group in a subprocess, the real `Engine` drives it in-process against the in-memory
cluster, and the example's own tests run against the installed copy. No servers: a few seconds.
"""

import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.engine.config import EngineConfig, PolicySelection, SettleConfig
from autoscaler.engine.engine import Engine
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.report import RoundReport
from autoscaler.policies.contract import PolicyPlugin, Snapshot
from autoscaler.policies.registry import build, find
from tests.support.memory_cluster import GPU, START, CurveThroughput, MemoryCluster, make_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "policy-plugin"
PACKAGE = "autoscaler_policy_example"
NAME = "weighted-fair-share"
CONFIG = EngineConfig(
    settle=SettleConfig(settle_seconds=0, cooldown_seconds=0, scale_down_stabilization_seconds=0),
    policy=PolicySelection(name=NAME, timeout_seconds=5),
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, built with the venv's setuptools and installed into a directory of its own."""
    work = tmp_path_factory.mktemp("plugin")
    source = work / "source"  # pip builds in the tree: a copy keeps build/ out of the repo
    shutil.copytree(
        EXAMPLE,
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"),
    )
    target = work / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    result = subprocess.run(
        [*pip, "--no-build-isolation", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, (
        "pip could not build the example offline; the venv needs setuptools>=77:\n" + result.stderr
    )
    return target


def run(site: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"},  # a clean tree
        check=False,
        timeout=120,
    )


def test_the_cli_lists_it_with_its_config_schema(site: Path) -> None:
    result = run(site, "-m", "autoscaler", "policies", "-o", "json")
    assert result.returncode == 0, result.stderr
    listing = {item["name"]: item for item in json.loads(result.stdout)}
    assert {NAME, "global-optimizer", "static"} <= set(listing)
    schema = listing[NAME]["config_schema"]
    assert schema["additionalProperties"] is False
    assert {key: field["default"] for key, field in schema["properties"].items()} == {
        "resource": GPU,
        "reserve": 0.0,
    }
    assert listing[NAME]["summary"].startswith("split one resource in proportion to job weights")


def test_decide_prints_its_decisions_and_the_objective(site: Path) -> None:
    """The README's command on the example's snapshot.json and config.yaml."""
    result = run(
        site,
        *("-m", "autoscaler", "decide", "--snapshot", str(EXAMPLE / "snapshot.json")),
        *("--policy", NAME, "--config", str(EXAMPLE / "config.yaml")),
    )
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["policy"] == NAME
    # 16 GPUs (18 less 2 reserved): llm and resnet stop at their maximum, bert takes the rest
    assert [(d["name"], d["replicas"], d["reason"]) for d in output["decisions"]] == [
        ("llm", 3, "FairShare"),
        ("resnet", 2, "FairShare"),
        ("bert", 6, "FairShare"),
    ]
    assert output["decisions"][2]["message"] == (
        "6 workers hold 6 of 16 nvidia.com/gpu, for weight 1 of 4"
    )
    # the default objective, Σ weight x E^-0.25 over expected remaining seconds E: no work is
    # declared and none attained yet, so each job has 600 worker-seconds left at its per-worker
    # rate; the curves are linear, so E = 600 / count
    assert output["objective"] == pytest.approx(sum(
        weight * (600 / count) ** -0.25 for weight, count in ((2, 3), (1, 2), (1, 6))
    ))  # fmt: skip


def test_an_unknown_config_key_exits_2_naming_it(site: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("reserv: 2\n")
    result = run(
        site,
        *("-m", "autoscaler", "decide", "--snapshot", str(EXAMPLE / "snapshot.json")),
        *("--policy", NAME, "--config", str(config)),
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: policy 'weighted-fair-share': reserv: Extra inputs are not permitted"
    ]


def test_the_example_s_own_tests_pass_against_the_installed_copy(site: Path) -> None:
    result = run(site, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=EXAMPLE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout


@pytest.fixture
def plugin(site: Path) -> Iterator[PolicyPlugin[Any]]:
    """The plug-in through the registry, with the install directory on sys.path meanwhile."""
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        plugin = find(NAME)
        assert Path(inspect.getfile(plugin.build)).is_relative_to(site)  # not some other copy
        yield plugin
    finally:
        sys.path.remove(str(site))
        for module in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[module]
        importlib.invalidate_caches()


def engine_for(
    plugin: PolicyPlugin[Any], jobs: list[ManagedJob], **curves: Any
) -> tuple[Engine, MemoryCluster]:
    cluster = MemoryCluster({job.key: job for job in jobs})
    throughput = CurveThroughput(
        cluster, {job.name: curves.get(job.name, lambda n: 100.0 * n) for job in jobs}
    )
    policy = build(plugin, CONFIG.policy.config)
    engine = Engine(
        cluster=cluster, throughput=throughput, policy=policy, policy_name=NAME, config=CONFIG
    )
    return engine, cluster


def run_rounds(engine: Engine, count: int) -> list[RoundReport]:
    try:
        return [engine.run_once(now=START + timedelta(seconds=30 * i)) for i in range(count)]
    finally:
        engine.close()


def test_the_engine_writes_its_counts_through_the_settle_steps(
    plugin: PolicyPlugin[Any],
) -> None:
    assert plugin.name == NAME
    # 16 GPUs, 2 per worker: 8 workers split 3:1 -> heavy 6, light 2
    jobs = [make_job("heavy", replicas=1, weight=3.0), make_job("light", replicas=2)]
    engine, cluster = engine_for(plugin, jobs)
    reports = run_rounds(engine, 4)

    assert cluster.writes == [("heavy", 5), ("heavy", 6)]  # at most 4 more workers per round
    first, second = (report.outcomes[0].settled for report in reports[:2])
    assert [step.reason for step in first.steps] == ["FairShare", "ScaleUpLimited"]
    assert [step.reason for step in second.steps] == ["FairShare"]
    assert all(report.fallback == "" for report in reports)
    # Events on rescales only: "light" stays at 2 for a policy reason, which `explain` shows.
    assert cluster.events == [("heavy", "Rescaled", False), ("heavy", "Rescaled", False)]
    assert cluster.messages == [
        ("heavy", "1 -> 5 workers (ScaleUpLimited): at most 4 more workers per decision"),
        (
            "heavy",
            "5 -> 6 workers (FairShare): 6 workers hold 12 of 16 nvidia.com/gpu, for weight 3 of 4",
        ),
    ]


def test_a_held_job_keeps_its_count_and_the_others_share_the_rest(
    plugin: PolicyPlugin[Any],
) -> None:
    # "busy" has no throughput reading: the engine holds it at 6 (shown with min = max = 6)
    jobs = [make_job("busy", replicas=6), make_job("idle", replicas=1)]
    engine, cluster = engine_for(plugin, jobs, busy=lambda n: float("nan"))
    [report] = run_rounds(engine, 1)

    assert cluster.writes == [("idle", 2)]  # 16 - 12 GPUs left: 2 workers, not an equal 4 and 4
    busy = report.outcomes[0].settled
    assert (busy.replicas, [step.reason for step in busy.steps]) == (
        6,
        ["FairShare", "MetricsUnavailable"],
    )
    assert ("busy", "MetricsUnavailable", True) in cluster.events


def test_the_same_file_loads_as_a_single_file_policy() -> None:
    path = EXAMPLE / "src" / PACKAGE / "policy.py"
    try:
        plugin = find(str(path))
    finally:
        sys.modules.pop(f"autoscaler_policy_file_{path.stem}", None)
    assert plugin.name == NAME
    snapshot = Snapshot.model_validate_json((EXAMPLE / "snapshot.json").read_text())
    decisions = build(plugin, {"reserve": 2}).decide(snapshot, now=START)
    assert [(d.name, d.replicas) for d in decisions] == [("llm", 3), ("resnet", 2), ("bert", 6)]
