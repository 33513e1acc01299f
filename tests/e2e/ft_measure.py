"""What a torchft job's event log says about its resizes and faults: pauses, restarts, steps.

The torchft example (`examples/torchft/train.py --events FILE`) appends one JSON line per event
and process: `start`, `commit` (every step: its number, whether it committed, whether the group
was healing, the participants, the job's samples, every few steps a hash of the parameters),
`stop` and `done`. A pause is the survivors' longest gap between committed steps from a resize's or
fault's cause until it is over (every newcomer in, every survivor committing at the new world),
or until the scenario's end when it never is. Pure functions of those lines, checked on tables.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Event = dict[str, Any]
KIND = "torchft"
LIGHTHOUSE_LOST = "lighthouse killed"
NODE_LOST = "node lost"


@dataclass(frozen=True)
class Resize:
    job: str
    cause: str
    pause_seconds: float  # survivors' longest gap between committed steps until it was over
    survivor_restarts: int  # survivors whose process started again
    newcomer_seconds: float | None = None  # cause -> every newcomer's first participating commit
    steps_redone: int = 0  # a restart from the checkpoint (the lighthouse lost) trains these again
    target_seconds: float | None = None  # its own bound, where it has one (a lost node)
    kind: str = KIND

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def committed(events: Iterable[Event]) -> list[Event]:
    return [e for e in events if e["event"] == "commit" and e["ok"]]


def hosts_committing(events: Sequence[Event], *, before: float) -> set[str]:
    return {e["host"] for e in committed(events) if e["time"] < before}


def _first_commit(
    events: Sequence[Event], host: str, *, since: float, participants: int | None = None
) -> float | None:
    """`host`'s first participating commit from `since` (with `participants`, if given)."""
    return next(
        (
            e["time"]
            for e in committed(events)
            if e["host"] == host
            and e["time"] >= since
            and not e["healing"]
            and participants in (None, e["participants"])
        ),
        None,
    )


def over_at(
    events: Sequence[Event],
    *,
    survivors: set[str],
    newcomers: set[str],
    world: int,
    after: float,
    added_at: Mapping[str, float] | None = None,
) -> float | None:
    """When a resize caused at `after` was over: every newcomer had committed as a participant
    (from when it was added, `added_at`, where later: a killed pod's old process never counts),
    then every survivor had committed with `world` participants (None: not yet). The newcomers
    come first so that a survivor's step in flight at the cause, at the old world, never ends it."""
    since_added = added_at or {}
    joined = [
        _first_commit(events, host, since=max(after, since_added.get(host, after)))
        for host in newcomers
    ]
    if None in joined:
        return None
    since = max([after, *joined])  # type: ignore[list-item]
    done = [_first_commit(events, host, since=since, participants=world) for host in survivors]
    if None in done:
        return None
    return max([since, *done])  # type: ignore[list-item]


def pause(events: Sequence[Event], *, survivors: set[str], after: float, until: float) -> float:
    """The longest time a survivor (by host) went without committing from the cause at `after`
    until `until` (the resize over, or the scenario's end): however late a gap starts, and a
    survivor that never commits again pauses until `until`."""
    longest = 0.0
    for host in survivors:
        previous = after
        for at in sorted(e["time"] for e in committed(events) if e["host"] == host):
            if after < at <= until:
                longest, previous = max(longest, at - previous), at
        longest = max(longest, until - previous)
    return round(longest, 2)


def restarted(
    events: Sequence[Event], *, survivors: set[str], after: float, until: float
) -> set[str]:
    """Survivors (hosts) whose process started again between the cause and `until`."""
    return {
        e["host"]
        for e in events
        if e["event"] == "start" and e["host"] in survivors and after < e["time"] <= until
    }


def newcomers_first_commit(
    events: Sequence[Event],
    *,
    newcomers: set[str],
    after: float,
    added_at: Mapping[str, float] | None = None,
) -> float | None:
    """Seconds from `after` until every newcomer (host) had a participating commit (from when it
    was added, `added_at`, where later)."""
    since_added = added_at or {}
    firsts = [
        _first_commit(events, host, since=max(after, since_added.get(host, after)))
        for host in newcomers
    ]
    if not firsts or None in firsts:
        return None
    return round(max(firsts) - after, 2)  # type: ignore[type-var]


def measure(
    events: Sequence[Event],
    *,
    job: str,
    cause: str,
    after: float,
    survivors: set[str],
    world: int,
    end: float,
    newcomers: set[str] | None = None,
    added_at: Mapping[str, float] | None = None,
    target_seconds: float | None = None,
) -> Resize:
    """One resize or fault caused at `after`, measured until it was over (every newcomer in,
    every survivor committing at `world`), or until `end` when it never was."""
    joining = newcomers or set()
    over = over_at(
        events,
        survivors=survivors,
        newcomers=joining,
        world=world,
        after=after,
        added_at=added_at,
    )
    until = end if over is None else over
    return Resize(
        job=job,
        cause=cause,
        pause_seconds=pause(events, survivors=survivors, after=after, until=until),
        survivor_restarts=len(restarted(events, survivors=survivors, after=after, until=until)),
        newcomer_seconds=newcomers_first_commit(
            events, newcomers=joining, after=after, added_at=added_at
        )
        if joining
        else None,
        target_seconds=target_seconds,
    )


@dataclass(frozen=True)
class Cause:
    """One change to a job's world: a `/scale` write, a kill."""

    at: float
    label: str
    world: int  # groups once it is over
    before: frozenset[str]  # hosts in the world before it
    removed: frozenset[str] = frozenset()  # hosts it takes out (deleted, killed)
    added: frozenset[str] = frozenset()  # hosts it brings (back) in


def _members(events: Sequence[Event], causes: Sequence[Cause]) -> tuple[set[str], dict[str, float]]:
    """(survivors, newcomers with when each was added) of causes taken as one: the hosts in the
    world before the first that none of them took out, and the hosts they brought in that stayed."""
    survivors = set(causes[0].before) & hosts_committing(events, before=causes[0].at)
    newcomers: dict[str, float] = {}
    for cause in causes:
        survivors -= cause.removed
        newcomers = {h: t for h, t in newcomers.items() if h not in cause.removed}
        newcomers |= dict.fromkeys(cause.added, cause.at)
    return survivors, newcomers


def measure_causes(
    events: Sequence[Event], *, job: str, causes: Sequence[Cause], end: float
) -> list[Resize]:
    """Every cause measured until it was over; a cause the next one overtook before it was over
    joins it, measured from its own time until the last is over: its pause is the survivors',
    those in the world throughout, never cut short by the next cause."""
    ordered, measured, first = sorted(causes, key=lambda c: c.at), [], 0
    for last in range(len(ordered)):
        joined = ordered[first : last + 1]
        survivors, newcomers = _members(events, joined)
        if last + 1 < len(ordered):
            over = over_at(
                events,
                survivors=survivors,
                newcomers=set(newcomers),
                world=joined[-1].world,
                after=joined[0].at,
                added_at=newcomers,
            )
            if over is None or over > ordered[last + 1].at:
                continue
        measured.append(
            measure(
                events,
                job=job,
                cause=", then ".join(c.label for c in joined),
                after=joined[0].at,
                survivors=survivors,
                world=joined[-1].world,
                end=end,
                newcomers=set(newcomers),
                added_at=newcomers,
            )
        )
        first = last + 1
    return measured


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
    node_lost: tuple[Resize, ...] = ()

    @property
    def node_lost_missed(self) -> list[Resize]:
        return [r for r in self.node_lost if r.pause_seconds > (r.target_seconds or 0.0)]

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

    @property
    def node_lost_line(self) -> str:
        if not self.node_lost:
            return "e2e-ft node lost: not measured"
        worst = max(self.node_lost, key=lambda r: r.pause_seconds - (r.target_seconds or 0.0))
        return (
            f"e2e-ft node lost: the survivors trained again after {worst.pause_seconds:.1f} s"
            f" (target {worst.target_seconds or 0.0:.1f} s: torchft's timeout for a silent"
            " peer's collective plus a re-form)"
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
        node_lost=tuple(r for r in resizes if r.cause == NODE_LOST),
    )
