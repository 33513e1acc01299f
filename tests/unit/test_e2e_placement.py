"""The training scenarios' spread share, computed from tables of layouts and pods."""

from pathlib import Path
from typing import Any

import pytest

from autoscaler.api import coordinates as c
from tests.e2e.placement import (
    MOVED,
    PLACED,
    Layout,
    SpreadTime,
    counter,
    running_gpu_worker,
    spread,
    spread_time,
    spreadable,
    summed,
)
from tests.e2e.report import main, spread_misses

FOUR = {"a": 4, "b": 4}
TWO = {"a": 2, "b": 2, "c": 2}


@pytest.mark.parametrize(
    ("workers", "node_gpus", "expected"),
    [
        ([("a", 1), ("a", 1), ("a", 1)], FOUR, False),
        ([("a", 1), ("a", 1), ("b", 1)], FOUR, True),  # 3 GPUs fill one 4-GPU node
        ([("a", 1), ("a", 1), ("a", 1), ("a", 1), ("b", 1)], FOUR, False),  # 5 fill two
        ([("a", 2), ("b", 2)], FOUR, True),  # two 2-GPU workers fill one node
        ([("a", 1), ("b", 1)], TWO, True),
        ([("a", 1), ("a", 1), ("b", 1)], TWO, False),
        ([("a", 1), ("b", 1), ("c", 1)], TWO, True),
    ],
)
def test_a_jobs_workers_are_spread_on_more_nodes_than_their_gpus_fill(
    workers: list[tuple[str, int]], node_gpus: dict[str, int], expected: bool
) -> None:
    assert spread(workers, node_gpus=node_gpus) is expected


@pytest.mark.parametrize(
    ("workers", "node_gpus", "expected"),
    [
        ([("a", 1)], FOUR, False),  # one worker is on one node
        ([("a", 1), ("a", 1)], FOUR, True),  # two workers, two nodes: one is enough
        ([("a", 1), ("a", 1)], {"a": 4}, False),  # one node to go to
        ([("a", 1), ("a", 1), ("a", 1), ("a", 1), ("b", 1)], FOUR, False),  # 5 fill both
        ([("a", 2), ("b", 2)], FOUR, True),
        ([("a", 1), ("b", 1)], {"a": 1, "b": 1, "c": 1}, False),  # 1-GPU nodes: never
        ([("a", 1), ("a", 1), ("b", 1)], TWO, True),  # 3 fill two 2-GPU nodes of three
    ],
)
def test_a_jobs_workers_could_spread_with_more_of_them_and_more_nodes_than_they_fill(
    workers: list[tuple[str, int]], node_gpus: dict[str, int], expected: bool
) -> None:
    assert spreadable(workers, node_gpus=node_gpus) is expected


def test_spread_time_weighs_each_layout_until_the_jobs_next() -> None:
    layouts = [
        Layout(at=0.0, job="x", spread=False, spreadable=True),
        Layout(at=10.0, job="y", spread=True, spreadable=True),
        Layout(at=12.0, job="y", spread=False),
        Layout(at=20.0, job="x", spread=None),  # x stops running
        Layout(at=30.0, job="x", spread=True, spreadable=True),
    ]
    found = spread_time(layouts, end=40.0)
    # x: 20 s packed, 10 s not running, 10 s spread; y: 2 s spread, 28 s packed and no choice.
    assert found == SpreadTime(spread_seconds=12.0, running_seconds=60.0, spreadable_seconds=32.0)
    assert found.share == pytest.approx(0.2)
    assert found.spreadable_share == pytest.approx(12 / 32)
    assert summed([found, SpreadTime(12.0, 60.0, 40.0, placed_workers=3, moved_workers=1)]) == (
        SpreadTime(24.0, 120.0, 72.0, placed_workers=3, moved_workers=1)
    )
    assert spread_time([], end=5.0).share == 0.0
    assert spread_time([], end=5.0).spreadable_share == 0.0


def pod(*, phase: str = "Running", node: str | None = "a", gpus: int = 1, **meta: Any) -> Any:
    return {
        "metadata": {
            "labels": {c.LABEL_JOB_NAME: "x", c.LABEL_REPLICA_TYPE: "worker"},
            **meta,
        },
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("found", "counted"),
    [
        (pod(), True),
        (pod(phase="Pending"), False),
        (pod(node=None), False),
        (pod(gpus=0), False),
        (pod(deletionTimestamp="2026-12-07T00:00:00Z"), False),
        (pod(labels={c.LABEL_JOB_NAME: "x", c.LABEL_REPLICA_TYPE: "master"}), False),
    ],
)
def test_only_a_jobs_running_gpu_workers_count(found: Any, counted: bool) -> None:
    assert running_gpu_worker(found) is counted


@pytest.mark.parametrize(
    ("measured", "missed"),
    [
        (SpreadTime(5.0, 100.0, 50.0), []),
        (SpreadTime(10.0, 100.0, 50.0), []),
        (SpreadTime(11.0, 100.0, 50.0), ["jobs ran spread 11% of the time"]),
        (SpreadTime(0.0, 0.0), ["no GPU job's placement was measured"]),
        (
            SpreadTime(0.0, 100.0),
            ["no job had room to spread: the check cannot tell a packed placement apart"],
        ),
    ],
)
def test_the_report_holds_the_spread_share_to_its_target(
    measured: SpreadTime, missed: list[str]
) -> None:
    assert spread_misses(measured) == missed


def test_the_report_prints_the_spread_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.jsonl"
    measured = SpreadTime(30.0, 200.0, 120.0, placed_workers=7, moved_workers=2)
    report.write_text(measured.to_json() + "\n")
    main([str(report)])
    out, err = capsys.readouterr()
    assert (
        "e2e placement: running jobs spread over more nodes than their GPUs fill 15% of 200"
        " job-seconds (target <= 10%), 25% of the 120 in which they had room to spread; workers"
        " pinned by the planned placement 7, moved 2" in out
    )
    assert "target missed: jobs ran spread 15% of the time" in err


EXPOSITION = f"""# HELP {PLACED} Workers the planned placement pinned to a node
# TYPE {PLACED} counter
{PLACED} 12.0
{PLACED.removesuffix("_total")}_created 1.7e+09
"""


def test_the_operators_placement_counters_are_read_from_its_metrics() -> None:
    assert counter(EXPOSITION, PLACED) == 12
    assert counter(EXPOSITION, MOVED) == 0  # not incremented yet
