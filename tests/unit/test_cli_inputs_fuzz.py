"""Generated (mostly broken) inputs to the commands that read files: `decide --snapshot`,
`engine --config --check`, `simulate --workload --check`. Each ends with exit 0, or with exit 2
and one line `error: ...` naming the broken field; never a traceback. In process for speed
(tests/support/manifest_verdicts.run_cli), plus one real subprocess run of each."""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings

from tests.support.input_strategies import engine_configs, snapshots, workloads
from tests.support.manifest_verdicts import Run, run_cli

EXAMPLES = 60


def assert_clean_exit(run: Run, field: str | None) -> None:
    assert run.status in (0, 2), run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    if run.status == 2:
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1, run.stderr
        assert lines[0].startswith("error: "), run.stderr
        if field is not None:
            assert field in lines[0], f"{field!r} not named: {lines[0]}"


def run_on(text: str, name: str, argv: list[str]) -> Run:
    """The command with the file (its path replacing `{}` in argv), in a fresh folder: hypothesis
    calls a test many times within one function-scoped fixture."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text)
        return run_cli([str(path) if arg == "{}" else arg for arg in argv])


@settings(max_examples=EXAMPLES)
@given(snapshots())
def test_decide_on_a_generated_snapshot_exits_cleanly(case: tuple[str, str | None]) -> None:
    text, field = case
    assert_clean_exit(run_on(text, "snapshot.json", ["decide", "--snapshot", "{}"]), field)


@settings(max_examples=EXAMPLES)
@given(engine_configs())
def test_engine_check_on_a_generated_config_exits_cleanly(case: tuple[str, str | None]) -> None:
    text, field = case
    run = run_on(text, "engine.yaml", ["engine", "--config", "{}", "--check"])
    assert_clean_exit(run, field)


@settings(max_examples=EXAMPLES)
@given(workloads())
def test_simulate_check_on_a_generated_workload_exits_cleanly(case: tuple[str, str | None]) -> None:
    text, field = case
    run = run_on(text, "workload.csv", ["simulate", "--workload", "{}", "--check"])
    assert_clean_exit(run, field)


@pytest.mark.parametrize(
    ("argv", "name", "text", "field"),
    [
        (["decide", "--snapshot"], "s.json", '{"jobs": [{"namespace": "a"}]}', "name"),
        (["engine", "--check", "--config"], "e.yaml", "interval_seconds: -1\n", "interval_seconds"),
        (["simulate", "--check", "--workload"], "w.csv", "name,submit_time\n", "profile"),
    ],
)
def test_a_real_process_exits_2_with_the_field(
    tmp_path: Path, argv: list[str], name: str, text: str, field: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", *argv, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert_clean_exit(Run(status=done.returncode, stdout=done.stdout, stderr=done.stderr), field)
    assert done.returncode == 2
