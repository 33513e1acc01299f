"""The training scenarios' figures, computed from tables of training events."""

from pathlib import Path
from typing import Any

import pytest

from tests.e2e import ft_measure
from tests.e2e.measure import (
    NODE_LOST,
    Rescale,
    first_full_step,
    redone_after,
    resumed_from_latest_checkpoint,
    stall,
    summarise,
    worlds_between,
)
from tests.e2e.report import main, misses
from tests.e2e.training import engine_settings_changed, engine_settings_line


def ev(
    event: str, time: float, process: int, rank: int, world: int, **fields: Any
) -> dict[str, Any]:
    return {
        "event": event,
        "time": time,
        "process": process,
        "rank": rank,
        "world": world,
        **fields,
    }


# A world of 2 (pids 1, 2) checkpoints at 10, steps to 12; a worker dies at t=20; a world of 2
# (pids 3, 4) resumes from 10 and steps from t=31 (rank 1) and t=32 (rank 0).
RESTART = [
    ev("start", 0, 1, 0, 2),
    ev("start", 0, 2, 1, 2),
    ev("resume", 1, 1, 0, 2, from_step=0),
    ev("step", 2, 1, 0, 2, step=10),
    ev("step", 2, 2, 1, 2, step=10),
    ev("checkpoint", 2.1, 1, 0, 2, step=10),
    ev("step", 3, 1, 0, 2, step=12),
    ev("step", 3, 2, 1, 2, step=12),
    ev("start", 25, 3, 0, 2),
    ev("start", 25, 4, 1, 2),
    ev("resume", 30, 3, 0, 2, from_step=10),
    ev("resume", 30, 4, 1, 2, from_step=10),
    ev("step", 31, 4, 1, 2, step=11),
    ev("step", 32, 3, 0, 2, step=11),
]


def test_a_stall_ends_when_every_rank_of_the_new_world_stepped() -> None:
    assert stall(RESTART, world=2, after=20, end=99) == 12
    assert first_full_step(RESTART, world=2, after=20) == 32


def test_steps_of_the_old_world_never_end_a_stall() -> None:
    """Old processes stepping after the change are not the new world."""
    assert stall(RESTART, world=2, after=2.5, end=99) == 29.5


@pytest.mark.parametrize(
    ("world", "after", "end", "stalled"),
    [
        (3, 20, 99, 79),  # a world never formed: the scenario's end counts
        (2, 31.5, 40, 8.5),  # rank 1 stepped, rank 0 never again: likewise
    ],
)
def test_a_world_that_never_forms_stalls_until_the_end(
    world: int, after: float, end: float, stalled: float
) -> None:
    events = [*RESTART, ev("start", 31.2, 5, 1, 2), ev("step", 31.6, 5, 1, 2, step=12)]
    assert stall(events, world=world, after=after, end=end) == stalled


def test_redone_steps_are_those_past_the_resumed_checkpoint() -> None:
    assert redone_after(RESTART, after=20) == 2
    assert redone_after(RESTART, after=40) == 0


def test_checkpoint_consistency() -> None:
    assert resumed_from_latest_checkpoint(RESTART) == []
    stale = [
        *RESTART,
        ev("checkpoint", 40, 3, 0, 2, step=20),
        ev("resume", 41, 5, 0, 2, from_step=10),
    ]
    assert resumed_from_latest_checkpoint(stale) == ["rank 0 resumed from 10, newest was 20"]
    split = [*RESTART, ev("checkpoint", 40, 3, 0, 2, step=10)]
    assert resumed_from_latest_checkpoint(split) == ["checkpoint 10 after 10"]


def test_a_checkpoint_saved_but_not_logged_before_rank_0_stopped_is_the_newest() -> None:
    """Rank 0 trained to 12, saved 12 and was stopped before logging it: a resume from 12 is right,
    one from a step rank 0 never trained is not, and a later resume from 10 is stale."""
    unlogged = [*RESTART[:8], ev("resume", 30, 3, 0, 2, from_step=12)]
    assert resumed_from_latest_checkpoint(unlogged) == []
    assert resumed_from_latest_checkpoint([*unlogged, ev("resume", 50, 5, 0, 2, from_step=10)]) == [
        "rank 0 resumed from 10, newest was 12"
    ]
    untrained = [*RESTART[:8], ev("resume", 30, 3, 0, 2, from_step=20)]
    assert resumed_from_latest_checkpoint(untrained) == ["rank 0 resumed from 20, newest was 10"]


def test_a_lost_node_is_reported_apart_with_its_target() -> None:
    lost = Rescale("j", NODE_LOST, 40.0, 2, target_seconds=60.0)
    measured = [Rescale("j", "scale-up", 10.0, 1), lost]
    summary = summarise(measured, lost_jobs=0)
    assert summary.line == (
        "e2e: rescales 1, median stall 10.0 s, max stall 10.0 s, lost jobs 0, steps redone 1"
    )
    assert summary.node_lost_line == (
        "e2e node lost: training again after 40.0 s (target 60.0 s: the collective timeout plus"
        " one re-form)"
    )
    assert NODE_LOST_MISS not in misses(summary)
    late = summarise(
        [*measured, Rescale("k", NODE_LOST, 61.0, 0, target_seconds=60.0)], lost_jobs=0
    )
    assert late.node_lost is not None
    assert late.node_lost.stall_seconds == 61.0
    assert NODE_LOST_MISS in misses(late)
    assert NO_NODE_LOST in misses(summarise(measured[:1], lost_jobs=0))


NODE_LOST_MISS = (
    "the lost node's survivors trained again past the collective timeout plus a re-form"
)
NO_NODE_LOST = "the lost node was not measured"
RECOVERED = Rescale("j", NODE_LOST, 45.0, 0, target_seconds=60.0)


def test_a_multi_pod_scale_up_is_held_to_one_pod_scale_ups_to_the_same_world() -> None:
    measured = [
        Rescale("j", "scale-up 1->2", 8.0, 0, pods_added=1, world=2),
        Rescale("j", "scale-up 3->4", 12.0, 0, pods_added=1, world=4),
        Rescale("j", "scale-up 3->4", 10.0, 0, pods_added=1, world=4),
        Rescale("j", "scale-up 2->4", 16.5, 0, pods_added=2, world=4),
        Rescale("j", "scale-up 1->3", 9.0, 0, world=3),  # a burst of writes: neither
        RECOVERED,
    ]
    summary = summarise(measured, lost_jobs=0)
    assert summary.multi_pod_ratio == 1.5
    assert summary.scale_up_line == (
        "e2e scale-ups to one world size: several pods in one write 16.5 s, one pod 11.0 s"
        " (ratio 1.50)"
    )
    assert misses(summary) == [MULTI_POD_MISS]
    apart = summarise(
        [measured[0], measured[3], RECOVERED], lost_jobs=0
    )  # no one-pod scale-up to 4
    assert apart.scale_up_line == (
        "e2e scale-ups to one world size: several pods in one write none measured,"
        " one pod none measured"
    )
    assert misses(apart) == [NO_PAIR]


NO_PAIR = "no multi-pod and one-pod scale-up to the same world size to compare"
MULTI_POD_MISS = "a multi-pod scale-up stalled > 1.3x a one-pod one"


@pytest.mark.parametrize(
    ("stalls", "lost", "redone", "missed"),
    [
        ([10.0, 12.0, 13.0], 0, 9, []),
        ([14.0, 17.0, 18.0], 0, 0, ["median stall > 16.0 s"]),
        ([10.0, 12.0, 31.0], 0, 0, ["max stall > 30.0 s", MULTI_POD_MISS]),
        ([10.0], 1, 11, [NO_PAIR, "a job was lost", "more than 10 steps redone per rescale"]),
        ([], 0, 0, ["no rescale was measured", NO_PAIR]),
    ],
)
def test_the_summary_line_and_its_targets(
    stalls: list[float], lost: int, redone: int, missed: list[str]
) -> None:
    """To one world: the first rescale adds one pod, the rest (if any) several at once."""
    rescales = [
        Rescale("j", "scale-up", s, redone if i == 0 else 0, pods_added=1 if i == 0 else 2, world=4)
        for i, s in enumerate(stalls)
    ]
    summary = summarise([*rescales, RECOVERED], lost_jobs=lost)
    assert misses(summary) == missed
    if stalls == [10.0, 12.0, 13.0]:
        assert summary.line == (
            "e2e: rescales 3, median stall 12.0 s, max stall 13.0 s, lost jobs 0, steps redone 9"
        )


HISTORY = [(0.0, 2), (10.0, 4), (30.0, 2), (40.0, 3), (50.0, 4)]


@pytest.mark.parametrize(
    ("steps", "found"),
    [
        ([(15, 4), (45, 3), (55, 4)], {}),  # world 3 after the later 2 -> 3 write is no re-form
        ([(12, 3), (15, 4)], {"2->4 at 10": [3]}),
        ([(5, 3)], {}),  # before the write
    ],
)
def test_worlds_between_the_sizes_of_a_multi_pod_write(
    steps: list[tuple[float, int]], found: dict[str, list[int]]
) -> None:
    events = [{"event": "step", "time": time, "world": world} for time, world in steps]
    assert worlds_between(HISTORY, events) == found


def test_every_engine_setting_that_differs_from_the_shipped_default_is_named() -> None:
    changed = engine_settings_changed()
    assert "settle.settle_seconds 32 (shipped 180.0)" in changed
    assert "settle.cooldown_seconds 32 (shipped 180.0)" in changed
    assert "interval_seconds 2.0 (shipped 30.0)" in changed
    assert not any(name.startswith(("namespaces", "prometheus.url")) for name in changed)
    assert engine_settings_line().endswith(", ".join(changed))


def test_the_report_judges_both_lost_nodes_and_prints_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ft_lost = ft_measure.Resize(
        job="f",
        cause=ft_measure.NODE_LOST,
        pause_seconds=9.0,
        survivor_restarts=0,
        target_seconds=6.0,
    )
    lighthouse = ft_measure.Resize(
        job="f", cause=ft_measure.LIGHTHOUSE_LOST, pause_seconds=30.0, survivor_restarts=2
    )
    rescales = [
        Rescale("j", "scale-up 1->2", 8.0, 0, pods_added=1, world=4),
        Rescale("j", "scale-up 2->4", 9.0, 0, pods_added=2, world=4),
        Rescale("j", NODE_LOST, 70.0, 0, target_seconds=60.0),
    ]
    lines = [r.to_json() for r in [*rescales, ft_lost, lighthouse]]
    report = tmp_path / "report.jsonl"
    report.write_text("\n".join([*lines, '{"lost": 0}', '{"ft_lost_steps": 0}']) + "\n")
    assert main([str(report)]) == 1
    out, err = capsys.readouterr()
    assert "e2e node lost: training again after 70.0 s (target 60.0 s" in out
    assert "e2e-ft node lost: the survivors trained again after 9.0 s (target 6.0 s" in out
    assert out.splitlines()[0] == engine_settings_line()
    assert f"target missed: {NODE_LOST_MISS}" in err
    assert "past their timeout plus a re-form" in err
