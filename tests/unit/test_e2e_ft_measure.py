"""The torchft scenarios' measurements, on tables of events (`tests/e2e/ft_measure.py`)."""

from typing import Any

from tests.e2e import ft_measure as m
from tests.e2e.report import ft_misses

Event = dict[str, Any]


def commit(
    host: str, at: float, step: int, *, process: str = "", ok: bool = True, **extra: Any
) -> Event:
    return {
        "event": "commit",
        "time": at,
        "host": host,
        "process": process or host,
        "step": step,
        "ok": ok,
        "healing": extra.pop("healing", False),
        "participants": extra.pop("participants", 2),
        "samples": extra.pop("samples", (step + 1) * 256),
        **extra,
    }


def start(host: str, at: float, *, process: str = "") -> Event:
    return {"event": "start", "time": at, "host": host, "process": process or host}


# Two groups step every 0.1 s; `b` is killed at 10.0 and its replacement `b2` heals in at 12.0.
RUN = [
    start("a", 0.0),
    start("b", 0.0),
    *(commit(h, 9.0 + i / 10, 90 + i) for i in range(10) for h in ("a", "b")),
    *(commit("a", 10.8 + i / 10, 100 + i, participants=1) for i in range(10)),
    start("b", 11.0, process="b2"),
    commit("b", 12.0, 110, process="b2", healing=True),
    *(
        commit(h, 12.1 + i / 10, 111 + i, process=p)
        for i in range(5)
        for h, p in (("a", "a"), ("b", "b2"))
    ),
]


def test_the_pause_is_the_survivors_longest_gap_after_the_cause() -> None:
    assert m.pause(RUN, survivors={"a"}, after=10.0) == 0.9  # 9.9 -> 10.8
    assert m.pause(RUN, survivors={"a"}, after=10.0, window=0.5) == 0.9  # starts in the window
    assert m.pause(RUN, survivors={"a"}, after=12.0) == 0.4  # 11.7 -> 12.1, as b heals in


def test_a_restarted_survivor_is_one_whose_process_started_again() -> None:
    assert m.restarted(RUN, survivors={"a"}, after=10.0) == set()
    assert m.restarted(RUN, survivors={"a", "b"}, after=10.0) == {"b"}


def test_a_newcomer_counts_from_its_first_participating_commit() -> None:
    assert m.newcomers_first_commit(RUN, newcomers={"b"}, after=10.0) == 2.1  # 12.0 healed
    assert m.newcomers_first_commit(RUN, newcomers={"c"}, after=10.0) is None


def test_no_step_lost_or_applied_twice_in_a_run_that_healed() -> None:
    assert m.lost_steps(RUN) == []
    assert m.applied_twice(RUN) == []
    gap = [e for e in RUN if not (e["event"] == "commit" and e["step"] == 104)]
    assert m.lost_steps(gap) == [104]
    again = [*RUN, commit("a", 20.0, 103)]
    assert m.applied_twice(again) == ["a committed step 103 after 115"]
    other = [*RUN, commit("c", 20.0, 115, samples=1)]
    assert m.applied_twice(other) == [f"step 115 ended at 1 and {116 * 256} samples"]


def test_diverged_parameters_are_found_by_their_hashes() -> None:
    same = [commit("a", 1.0, 9, hash="x"), commit("b", 1.0, 9, hash="x")]
    assert m.diverged(same) == []
    assert m.diverged([*same, commit("c", 1.1, 9, hash="y")]) == [9]


def test_a_restart_from_the_checkpoint_redoes_steps_and_starts_a_generation() -> None:
    run = [
        start("a", 0.0),
        *(commit("a", 1 + i, i) for i in range(10)),
        start("a", 20.0, process="a2"),
        *(commit("a", 21 + i, 5 + i, process="a2") for i in range(8)),
    ]
    assert m.redone(run, after=15.0) == 5  # steps 5..9 again after the checkpoint at 5
    old, new = m.generations(run, restarted_at=15.0)
    assert {e["process"] for e in new} == {"a2"}
    assert m.applied_twice(old) == m.applied_twice(new) == []


def test_the_summary_line_keeps_the_lighthouse_apart() -> None:
    resizes = [
        m.Resize(
            job="j",
            cause="scale-up 1->2",
            pause_seconds=0.3,
            survivor_restarts=0,
            newcomer_seconds=6.0,
        ),
        m.Resize(job="j", cause="kill worker-0", pause_seconds=0.8, survivor_restarts=0),
        m.Resize(job="j", cause="node lost", pause_seconds=4.5, survivor_restarts=0),
        m.Resize(
            job="j",
            cause=m.LIGHTHOUSE_LOST,
            pause_seconds=30.0,
            survivor_restarts=2,
            steps_redone=40,
        ),
    ]
    summary = m.summarise(resizes, lost_steps=0)
    assert summary.line == (
        "e2e-ft: resizes 3, median pause 0.8 s, max pause 4.5 s, survivor restarts 0, lost steps 0"
    )
    assert summary.newcomer_line.endswith("median 6.0 s, max 6.0 s")
    assert summary.lighthouse_line == (
        "e2e-ft lighthouse lost: training again after 30.0 s, 40 steps redone, every worker restarted"
    )


def test_the_torchft_targets_are_held_and_a_miss_is_named() -> None:
    met = [
        m.Resize(job="j", cause="kill worker-0", pause_seconds=1.5, survivor_restarts=0),
        m.Resize(job="j", cause=m.LIGHTHOUSE_LOST, pause_seconds=30.0, survivor_restarts=2),
    ]
    assert ft_misses(m.summarise(met, lost_steps=0)) == []
    slow = [*met, m.Resize(job="j", cause="node lost", pause_seconds=7.0, survivor_restarts=1)]
    assert ft_misses(m.summarise(slow, lost_steps=3)) == [
        "a torchft survivor restarted",
        "a torchft step was lost",
        "torchft median pause > 2.0 s",
        "torchft max pause > 6.0 s",
    ]
    assert ft_misses(m.summarise([], lost_steps=0)) == [
        "no torchft resize was measured",
        "the torchft lighthouse loss was not measured",
    ]
