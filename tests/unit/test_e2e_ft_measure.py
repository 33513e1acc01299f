"""The torchft scenarios' measurements, on tables of events (`tests/e2e/ft_measure.py`)."""

from dataclasses import replace
from typing import Any

import pytest

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


def test_the_pause_is_the_survivors_longest_gap_from_the_cause_until_it_is_over() -> None:
    over = m.over_at(RUN, survivors={"a"}, newcomers={"b"}, world=2, after=10.0)
    assert over == 12.1  # b healed at 12.0, participated at 12.1; a committed with 2 at 12.1
    assert m.pause(RUN, survivors={"a"}, after=10.0, until=12.1) == 0.8  # 10.0 -> 10.8
    assert m.pause(RUN, survivors={"a"}, after=10.85, until=12.1) == 0.4  # 11.7 -> 12.1


def test_a_step_in_flight_at_the_old_world_does_not_end_a_resize() -> None:
    """`a` commits with 2 participants just after b's kill: the resize is over only once b is
    back in, so the gap after a's steps alone (10.5 -> 12.4) is measured."""
    run = [
        start("a", 0.0),
        start("b", 0.0),
        commit("a", 10.05, 100),
        *(commit("a", 10.1 + i / 10, 101 + i, participants=1) for i in range(5)),
        commit("a", 12.4, 106, participants=1),  # the quorum's timeout
        start("b", 11.0, process="b2"),
        commit("b", 12.5, 107, process="b2", healing=True),
        commit("a", 12.6, 108),
        commit("b", 12.6, 108, process="b2"),
    ]
    over = m.over_at(run, survivors={"a"}, newcomers={"b"}, world=2, after=10.0)
    assert over == 12.6
    assert m.pause(run, survivors={"a"}, after=10.0, until=over) == 1.9
    measured = m.measure(
        run,
        job="j",
        cause="kill b",
        after=10.0,
        survivors={"a"},
        world=2,
        end=99.0,
        newcomers={"b"},
    )
    assert (measured.pause_seconds, measured.newcomer_seconds) == (1.9, 2.6)


@pytest.mark.parametrize(
    ("gap_starts", "pause"),
    [
        (12.0, 5.0),  # within seconds of the cause
        (45.0, 5.0),  # long after it: no window leaves it out
    ],
)
def test_a_gap_that_starts_late_is_measured(gap_starts: float, pause: float) -> None:
    """`a` trains on at 2 groups after a scale-down from 3, then stalls 5 s; `b`, slower to see
    the new world, commits at 2 only after the stall: the resize is over then."""
    steps = [10.0 + i / 2 for i in range(int((gap_starts - 10.0) * 2) + 1)]
    run = [
        *(commit("a", at, i, participants=2) for i, at in enumerate(steps)),
        commit("a", gap_starts + pause, len(steps), participants=2),
        *(commit("b", at, i, participants=3) for i, at in enumerate(steps)),
        commit("b", gap_starts + pause, len(steps), participants=2),
    ]
    measured = m.measure(
        run, job="j", cause="scale-down 3->2", after=10.0, survivors={"a", "b"}, world=2, end=99.0
    )
    assert measured.pause_seconds == pause


def test_a_survivor_that_never_commits_again_pauses_until_the_scenario_ends() -> None:
    run = [*(commit(h, 9.0 + i / 10, 90 + i) for i in range(10) for h in ("a", "b"))]
    run += [commit("a", 10.5 + i / 10, 100 + i, participants=1) for i in range(10)]
    assert m.over_at(run, survivors={"a", "b"}, newcomers=set(), world=1, after=10.0) is None
    measured = m.measure(
        run, job="j", cause="scale-down 2->1", after=10.0, survivors={"a", "b"}, world=1, end=70.0
    )
    assert measured.pause_seconds == 60.0  # b: from the cause to the end
    alone = m.measure(
        run, job="j", cause="scale-down 2->1", after=10.0, survivors={"a"}, world=1, end=70.0
    )
    assert alone.pause_seconds == 0.5


def test_a_restarted_survivor_is_one_whose_process_started_again() -> None:
    assert m.restarted(RUN, survivors={"a"}, after=10.0, until=99.0) == set()
    assert m.restarted(RUN, survivors={"a", "b"}, after=10.0, until=99.0) == {"b"}
    assert m.restarted(RUN, survivors={"a", "b"}, after=10.0, until=10.5) == set()


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
    lost = m.Resize(
        job="j", cause=m.NODE_LOST, pause_seconds=4.2, survivor_restarts=0, target_seconds=6.0
    )
    met = [
        m.Resize(job="j", cause="kill worker-0", pause_seconds=1.5, survivor_restarts=0),
        m.Resize(job="j", cause="scale-down 3->2", pause_seconds=0.3, survivor_restarts=0),
        lost,
        m.Resize(job="j", cause=m.LIGHTHOUSE_LOST, pause_seconds=30.0, survivor_restarts=2),
    ]
    assert ft_misses(m.summarise(met, lost_steps=0)) == []
    assert m.summarise(met, lost_steps=0).node_lost_line == (
        "e2e-ft node lost: the survivors trained again after 4.2 s (target 6.0 s: torchft's"
        " timeout for a silent peer's collective plus a re-form)"
    )
    slow = [
        *met,
        m.Resize(job="j", cause="scale-up 1->2", pause_seconds=7.0, survivor_restarts=1),
        m.Resize(job="j", cause="scale-up 2->3", pause_seconds=2.5, survivor_restarts=0),
        replace(lost, pause_seconds=6.1),
    ]
    assert ft_misses(m.summarise(slow, lost_steps=3)) == [
        "a torchft survivor restarted",
        "a torchft step was lost",
        "torchft median pause > 2.0 s",
        "torchft max pause > 6.0 s",
        "the torchft lost node's survivors trained again past their timeout plus a re-form",
    ]
    assert ft_misses(m.summarise([], lost_steps=0)) == [
        "no torchft resize was measured",
        "the torchft lighthouse loss was not measured",
        "the torchft lost node was not measured",
    ]


def test_a_cause_overtaken_before_it_was_over_joins_the_next() -> None:
    """As in a run: `w0` killed at 10 is back at 14 (healing, then at 2 groups of the 2 its
    world shrank to); the engine shrank 4 -> 2 at 12, before the kill was over (`w2`, `w3`
    stopped), and grew back at 20 (new processes of `w2`, `w3`, at 4 groups from 24). The kill
    and the scale-down are one resize, over at 14.2; `w2` and `w3` are never counted as restarted
    survivors, and `w1`'s pause is its own longest gap."""
    hosts = ("w0", "w1", "w2", "w3")
    run = [
        *(commit(h, 9.0 + i / 10, 90 + i, participants=4) for i in range(10) for h in hosts),
        *(commit(h, 10.5 + i / 10, 100 + i, participants=3) for i in range(15) for h in hosts[1:]),
        start("w0", 11.0, process="w0b"),
        commit("w0", 14.0, 115, process="w0b", healing=True),
        *(commit(h, 14.2 + i / 10, 116 + i, participants=2) for i in range(98) for h in ("w1",)),
        *(commit("w0", 14.2 + i / 10, 116 + i, process="w0b", participants=2) for i in range(98)),
        start("w2", 21.0, process="w2b"),
        start("w3", 21.0, process="w3b"),
        *(
            commit(h, 24.0 + i / 10, 200 + i, process=p, participants=4)
            for i in range(5)
            for h, p in (("w0", "w0b"), ("w1", "w1"), ("w2", "w2b"), ("w3", "w3b"))
        ),
    ]
    every = frozenset(hosts)
    causes = [
        m.Cause(10.0, "kill w0", 4, every, frozenset({"w0"}), frozenset({"w0"})),
        m.Cause(12.0, "scale-down 4->2", 2, every, frozenset({"w2", "w3"})),
        m.Cause(20.0, "scale-up 2->4", 4, frozenset({"w0", "w1"}), added=frozenset({"w2", "w3"})),
    ]
    joined, grown = m.measure_causes(run, job="j", causes=causes, end=99.0)
    assert joined.cause == "kill w0, then scale-down 4->2"
    assert (joined.survivor_restarts, joined.newcomer_seconds) == (0, 4.2)
    assert joined.pause_seconds == 2.3  # w1: its last at 3 groups (11.9) -> its first at 2
    assert grown.cause == "scale-up 2->4"
    assert (grown.survivor_restarts, grown.newcomer_seconds, grown.pause_seconds) == (0, 4.0, 0.1)
    separate = m.measure_causes(run, job="j", causes=causes[:1], end=99.0)
    assert separate[0].survivor_restarts == 2  # alone, the kill counts w2's and w3's new processes


def test_a_killed_pod_counts_as_back_only_from_its_new_process() -> None:
    """2 -> 4 at 5.0 (`w2`, `w3` never get in), `w0` killed at 6.0, 4 -> 2 at 7.0: one resize.
    `w0`'s old process committed at 2 groups after the first cause; only its new one, at 8.2,
    brings the world back to 2, and `w1`'s gap until then counts."""
    run = [
        *(commit(h, 4.0 + i / 10, 40 + i) for i in range(20) for h in ("w0", "w1")),
        *(commit("w1", 6.0 + i / 10, 60 + i, participants=1) for i in range(5)),
        start("w0", 7.0, process="w0b"),
        commit("w0", 8.0, 65, process="w0b", healing=True),
        *(
            commit(h, 8.2 + i / 10, 66 + i, process=p)
            for i in range(5)
            for h, p in (("w0", "w0b"), ("w1", "w1"))
        ),
    ]
    two, four = frozenset({"w0", "w1"}), frozenset({"w2", "w3"})
    causes = [
        m.Cause(5.0, "scale-up 2->4", 4, two, added=four),
        m.Cause(6.0, "kill w0", 4, two | four, frozenset({"w0"}), frozenset({"w0"})),
        m.Cause(7.0, "scale-down 4->2", 2, two | four, removed=four),
    ]
    (measured,) = m.measure_causes(run, job="j", causes=causes, end=99.0)
    assert measured.cause == "scale-up 2->4, then kill w0, then scale-down 4->2"
    assert (measured.pause_seconds, measured.newcomer_seconds) == (1.8, 3.2)  # w1: 6.4 -> 8.2
