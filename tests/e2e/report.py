"""`python -m tests.e2e.report FILE`: the training scenarios' figures in one line, then whether
they meet the targets (exit 1 when not). FILE is what a run with AUTOSCALER_E2E_REPORT wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autoscaler import fault_tolerance as ft
from tests.e2e import ft_measure, placement
from tests.e2e.measure import Rescale, Summary, summarise
from tests.e2e.training import CHECKPOINT_EVERY, COLLECTIVE_TIMEOUT, engine_settings_line

TARGET_MEDIAN_STALL = 16.0
TARGET_MAX_STALL = 30.0
# Several pods added by one write re-form the world once, as one pod does.
TARGET_MULTI_POD_RATIO = 1.3
# torchft mode: no survivor restarts, no step lost, survivors pause about a heartbeat timeout.
TARGET_FT_MEDIAN_PAUSE = 2.0
TARGET_FT_MAX_PAUSE = 6.0
# A node gone silent: the survivors' collective times out, then the world re-forms once.
TARGET_NODE_LOST = COLLECTIVE_TIMEOUT + TARGET_MAX_STALL
# torchft mode: a silent peer's collective times out, then the quorum re-forms without it (a
# quorum tick, the process group's reconfiguration, a step: a resize's median pause at most).
TARGET_FT_NODE_LOST = ft.DEFAULT_TIMEOUT_SECONDS + TARGET_FT_MEDIAN_PAUSE


def read(path: Path) -> tuple[Summary, ft_measure.Summary, placement.SpreadTime]:
    """The run's figures, torchrun's, torchft mode's and where the jobs ran; a run that wrote no
    report (it ended before any scenario) has none."""
    rescales, lost, resizes, lost_steps = [], 0, [], 0
    spread = placement.SpreadTime(spread_seconds=0.0, running_seconds=0.0)
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        if record.get("kind") == placement.KIND:
            record.pop("kind")
            spread = placement.SpreadTime(**record)
        elif "lost" in record:
            lost = int(record["lost"])
        elif "ft_lost_steps" in record:
            lost_steps = int(record["ft_lost_steps"])
        elif record.get("kind") == ft_measure.KIND:
            resizes.append(ft_measure.Resize(**record))
        else:
            rescales.append(Rescale(**record))
    summary = summarise(rescales, lost_jobs=lost)
    return summary, ft_measure.summarise(resizes, lost_steps=lost_steps), spread


def misses(summary: Summary) -> list[str]:
    """The targets this run missed, each with its figure."""
    checks = [
        (summary.rescales > 0, "no rescale was measured"),
        (summary.median_stall <= TARGET_MEDIAN_STALL, f"median stall > {TARGET_MEDIAN_STALL} s"),
        (summary.max_stall <= TARGET_MAX_STALL, f"max stall > {TARGET_MAX_STALL} s"),
        (
            summary.multi_pod_ratio is not None,
            "no multi-pod and one-pod scale-up to the same world size to compare",
        ),
        (
            (summary.multi_pod_ratio or 0.0) <= TARGET_MULTI_POD_RATIO,
            f"a multi-pod scale-up stalled > {TARGET_MULTI_POD_RATIO}x a one-pod one",
        ),
        (summary.node_lost is not None, "the lost node was not measured"),
        (
            not summary.node_lost_missed,
            "the lost node's survivors trained again past the collective timeout plus a re-form",
        ),
        (summary.lost_jobs == 0, "a job was lost"),
        (
            summary.steps_redone <= summary.rescales * CHECKPOINT_EVERY,
            f"more than {CHECKPOINT_EVERY} steps redone per rescale",
        ),
    ]
    return [message for ok, message in checks if not ok]


def ft_misses(summary: ft_measure.Summary) -> list[str]:
    """torchft mode's targets this run missed, each with its figure."""
    checks = [
        (summary.resizes > 0, "no torchft resize was measured"),
        (summary.survivor_restarts == 0, "a torchft survivor restarted"),
        (summary.lost_steps == 0, "a torchft step was lost"),
        (
            summary.median_pause <= TARGET_FT_MEDIAN_PAUSE,
            f"torchft median pause > {TARGET_FT_MEDIAN_PAUSE} s",
        ),
        (summary.max_pause <= TARGET_FT_MAX_PAUSE, f"torchft max pause > {TARGET_FT_MAX_PAUSE} s"),
        (bool(summary.lighthouse), "the torchft lighthouse loss was not measured"),
        (bool(summary.node_lost), "the torchft lost node was not measured"),
        (
            not summary.node_lost_missed,
            "the torchft lost node's survivors trained again past their timeout plus a re-form",
        ),
    ]
    return [message for ok, message in checks if not ok]


def spread_misses(spread: placement.SpreadTime) -> list[str]:
    """The placement's target, missed or not measured, with its figure."""
    if not spread.running_seconds:
        return ["no GPU job's placement was measured"]
    if not spread.spreadable_seconds:
        return ["no job had room to spread: the check cannot tell a packed placement apart"]
    if spread.share > placement.TARGET_SPREAD_SHARE:
        return [f"jobs ran spread {spread.share:.0%} of the time"]
    return []


def main(argv: list[str]) -> int:
    summary, ft_summary, spread = read(Path(argv[0]))
    missed = misses(summary) + ft_misses(ft_summary) + spread_misses(spread)
    for message in missed:
        print(f"target missed: {message}", file=sys.stderr)
    print(engine_settings_line())
    print(summary.scale_up_line)
    print(summary.node_lost_line)
    print(summary.line)
    print(ft_summary.line)
    print(ft_summary.newcomer_line)
    print(ft_summary.node_lost_line)
    print(ft_summary.lighthouse_line)
    print(spread.line)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
