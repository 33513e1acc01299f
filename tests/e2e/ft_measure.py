"""What a torchft job's event log says about its resizes and faults: pauses, restarts, steps.

The torchft example (`examples/torchft/train.py --events FILE`) appends one JSON line per event
and process: `start`, `commit` (every step: its number, whether it committed, whether the group
was healing, the participants, the job's samples, every few steps a hash of the parameters),
`stop` and `done`. A pause is the survivors' longest gap between committed steps around a resize
or fault. Pure functions of those lines, checked on tables of events.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Event = dict[str, Any]
# A resize's effects are over well within this: a leave costs the heartbeat timeout (2 s) or a
# collective's timeout (a silent peer), a join a fraction of a second.
WINDOW_SECONDS = 30.0
KIND = "torchft"
LIGHTHOUSE_LOST = "lighthouse killed"


@dataclass(frozen=True)
class Resize:
    job: str
    cause: str
    pause_seconds: float  # survivors' longest gap between committed steps
    survivor_restarts: int  # survivors whose process started again
    newcomer_seconds: float | None = None  # cause -> every newcomer's first participating commit
    steps_redone: int = 0  # a restart from the checkpoint (the lighthouse lost) trains these again
    kind: str = KIND

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def committed(events: Iterable[Event]) -> list[Event]:
    return [e for e in events if e["event"] == "commit" and e["ok"]]


def hosts_committing(events: Sequence[Event], *, before: float) -> set[str]:
    return {e["host"] for e in committed(events) if e["time"] < before}


def pause(
    events: Sequence[Event], *, survivors: set[str], after: float, window: float = WINDOW_SECONDS
) -> float:
    """The longest gap between two consecutive commits of a survivor's process (by host) that
    ends after `after` and starts before `after + window`; from `after` when a survivor has not
    committed since."""
    longest = 0.0
    by_process: dict[str, list[float]] = {}
    for e in committed(events):
        if e["host"] in survivors:
            by_process.setdefault(e["process"], []).append(e["time"])
    for times in by_process.values():
        times.sort()
        previous = None
        for at in times:
            if previous is not None and at > after and previous < after + window:
                longest = max(longest, at - max(previous, after - window))
            previous = at
    return round(longest, 2)


def restarted(
    events: Sequence[Event], *, survivors: set[str], after: float, window: float = WINDOW_SECONDS
) -> set[str]:
    """Survivors (hosts) whose process started again within the window."""
    return {
        e["host"]
        for e in events
        if e["event"] == "start" and e["host"] in survivors and after < e["time"] < after + window
    }


def newcomers_first_commit(
    events: Sequence[Event], *, newcomers: set[str], after: float
) -> float | None:
    """Seconds from `after` until every newcomer (host) had a participating commit."""
    firsts: dict[str, float] = {}
    for e in committed(events):
        if e["host"] in newcomers and e["time"] > after and not e["healing"]:
            firsts.setdefault(e["host"], e["time"])
    if set(firsts) != newcomers:
        return None
    return round(max(firsts.values()) - after, 2)


def lost_steps(events: Sequence[Event]) -> list[int]:
    """Step numbers between the first and the newest committed that no process committed."""
    steps = {e["step"] for e in committed(events)}
    return sorted(set(range(min(steps), max(steps) + 1)) - steps) if steps else []


def applied_twice(events: Sequence[Event]) -> list[str]:
    """A process that committed a step number again or went back; a step committed with
    different sample counts by different processes."""
    found, newest, samples = [], {}, {}
    for e in committed(events):
        process, step = e["process"], e["step"]
        if step <= newest.get(process, -1):
            found.append(f"{e['host']} committed step {step} after {newest[process]}")
        newest[process] = step
        if samples.setdefault(step, e["samples"]) != e["samples"]:
            found.append(f"step {step} ended at {e['samples']} and {samples[step]} samples")
    return found


def generations(events: Sequence[Event], *, restarted_at: float | None) -> list[list[Event]]:
    """The events of the processes started before `restarted_at` and of those started after
    (all of them as one when None)."""
    if restarted_at is None:
        return [list(events)]
    late = {e["process"] for e in events if e["event"] == "start" and e["time"] > restarted_at}
    return [
        [e for e in events if e["process"] not in late],
        [e for e in events if e["process"] in late],
    ]


def diverged(events: Sequence[Event]) -> list[int]:
    """Steps at which the processes' parameter hashes differ."""
    hashes: dict[int, set[str]] = {}
    for e in committed(events):
        if "hash" in e:
            hashes.setdefault(e["step"], set()).add(e["hash"])
    return sorted(step for step, seen in hashes.items() if len(seen) > 1)


def redone(events: Sequence[Event], *, after: float) -> int:
    """Steps committed before `after` that processes started after it committed again."""
    started = {e["process"] for e in events if e["event"] == "start" and e["time"] > after}
    before = {e["step"] for e in committed(events) if e["time"] <= after}
    again = {e["step"] for e in committed(events) if e["process"] in started}
    return len(before & again)


@dataclass(frozen=True)
class Summary:
    resizes: int
    median_pause: float
    max_pause: float
    survivor_restarts: int
    lost_steps: int
    newcomer_median: float | None
    newcomer_max: float | None
    lighthouse: tuple[Resize, ...]

    @property
    def line(self) -> str:
        return (
            f"e2e-ft: resizes {self.resizes}, median pause {self.median_pause:.1f} s, "
            f"max pause {self.max_pause:.1f} s, survivor restarts {self.survivor_restarts}, "
            f"lost steps {self.lost_steps}"
        )

    @property
    def newcomer_line(self) -> str:
        if self.newcomer_median is None or self.newcomer_max is None:
            return "e2e-ft newcomers: no scale-up measured"
        return (
            f"e2e-ft newcomers: first commit after the write, median {self.newcomer_median:.1f} s,"
            f" max {self.newcomer_max:.1f} s"
        )

    @property
    def lighthouse_line(self) -> str:
        if not self.lighthouse:
            return "e2e-ft lighthouse lost: not measured"
        worst = max(self.lighthouse, key=lambda r: r.pause_seconds)
        return (
            f"e2e-ft lighthouse lost: training again after {worst.pause_seconds:.1f} s, "
            f"{worst.steps_redone} steps redone, every worker restarted"
        )


def summarise(resizes: Sequence[Resize], *, lost_steps: int) -> Summary:
    regular = [r for r in resizes if r.cause != LIGHTHOUSE_LOST]
    pauses = [r.pause_seconds for r in regular]
    newcomers = [r.newcomer_seconds for r in regular if r.newcomer_seconds is not None]
    return Summary(
        resizes=len(regular),
        median_pause=statistics.median(pauses) if pauses else 0.0,
        max_pause=max(pauses, default=0.0),
        survivor_restarts=sum(r.survivor_restarts for r in regular),
        lost_steps=lost_steps,
        newcomer_median=statistics.median(newcomers) if newcomers else None,
        newcomer_max=max(newcomers) if newcomers else None,
        lighthouse=tuple(r for r in resizes if r.cause == LIGHTHOUSE_LOST),
    )
