"""What a training run's event log says about rescales: stalls, redone steps, world sizes.

The example training script (`examples/elastic-training/train.py --events FILE`) appends one JSON
line per event and process: `start`, `resume` (the checkpoint step it continues from), `step`
(every optimizer step, with the world size), `checkpoint` (rank 0) and `done`. Pure functions
of those lines, so the figures can be checked on a table of events.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]


def first_full_step(events: Sequence[Event], *, world: int, after: float) -> float | None:
    """When every rank of a `world`-sized world started after `after` had completed a step.

    Only processes started after `after` count: torchrun restarts every worker on a membership
    change, so the old world's last steps never pass for the new world's first."""
    started = {e["process"] for e in events if e["event"] == "start" and e["time"] > after}
    firsts: dict[int, float] = {}
    for event in events:
        if event["event"] == "step" and event["world"] == world and event["process"] in started:
            firsts.setdefault(event["rank"], event["time"])
            if len(firsts) == world:
                return max(firsts.values())
    return None


def stall(events: Sequence[Event], *, world: int, after: float, end: float) -> float:
    """Seconds from a change at `after` (a /scale write, a kill) to all ranks stepping at `world`;
    until `end` (the scenario's end) when they never did."""
    done = first_full_step(events, world=world, after=after)
    return (end if done is None else done) - after


def worlds_between(
    history: Sequence[tuple[float, int]], events: Sequence[Event]
) -> dict[str, list[int]]:
    """For each write that added several workers (`history`: (time, count) changes), the world
    sizes between its old and new count that stepped before the next write: a world re-formed
    more than once."""
    found = {}
    changes = [*history, (math.inf, 0)]  # the last change lasts
    for (_, before), (at, after), (until, _) in zip(
        changes, changes[1:], changes[2:], strict=False
    ):
        if after - before > 1:
            sizes = {
                e["world"]
                for e in events
                if e["event"] == "step" and at < e["time"] < until and before < e["world"] < after
            }
            if sizes:
                found[f"{before}->{after} at {at:.0f}"] = sorted(sizes)
    return found


def redone_after(events: Sequence[Event], *, after: float) -> int:
    """Steps trained before the world's first restart after `after` that its resume did not hold."""
    highest = 0
    for event in events:
        if event["event"] == "step":
            highest = max(highest, event["step"])
        elif event["event"] == "resume" and event["rank"] == 0 and event["time"] > after:
            return max(0, highest - event["from_step"])
    return 0


def resumed_from_latest_checkpoint(events: Sequence[Event]) -> list[str]:
    """Every resume starts from the newest checkpoint written before it; checkpoints only grow.

    Rank 0 logs a checkpoint after its atomic rename, so a rank 0 stopped between the two leaves a
    checkpoint on disk that the log never names (seen once in a CI run: a resume from 50 when the
    log's newest was 40). A resume from past the newest logged checkpoint is therefore right when
    rank 0 had trained that step; it then counts as the newest."""
    problems, latest, trained = [], 0, 0
    for event in events:
        if event["event"] == "step" and event["rank"] == 0:
            trained = max(trained, event["step"])
        elif event["event"] == "checkpoint":
            if event["step"] <= latest:
                problems.append(f"checkpoint {event['step']} after {latest}")
            latest = max(latest, event["step"])
        elif event["event"] == "resume":
            if latest < event["from_step"] <= trained:
                latest = event["from_step"]  # saved, stopped before its log line
            elif event["from_step"] != latest:
                problems.append(
                    f"rank {event['rank']} resumed from {event['from_step']}, newest was {latest}"
                )
    return problems


@dataclass(frozen=True)
class Rescale:
    """One measured change of a job's world: what caused it, and what it cost."""

    job: str
    cause: str  # "scale-up", "scale-down", "kill", "node-lost", ...
    stall_seconds: float
    steps_redone: int
    pods_added: int = 0  # by the one write a scale-up was (0: a burst of writes, not a scale-up)
    world: int = 0  # the world size it ended at
    target_seconds: float | None = None  # its own bound, where it has one (a lost node)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


@dataclass(frozen=True)
class Summary:
    rescales: int
    median_stall: float
    max_stall: float
    lost_jobs: int
    steps_redone: int
    # The multi-pod scale-up that stalled longest against the one-pod scale-ups to the same
    # world (its median): more workers start slower on shared cores, a second re-form is apart.
    one_pod_scale_up: float | None
    multi_pod_scale_up: float | None
    node_lost: Rescale | None  # the one furthest past its target among the nodes gone silent

    @property
    def multi_pod_ratio(self) -> float | None:
        if self.one_pod_scale_up is None or self.multi_pod_scale_up is None:
            return None
        return self.multi_pod_scale_up / self.one_pod_scale_up

    @property
    def line(self) -> str:
        return (
            f"e2e: rescales {self.rescales}, median stall {self.median_stall:.1f} s, "
            f"max stall {self.max_stall:.1f} s, lost jobs {self.lost_jobs}, "
            f"steps redone {self.steps_redone}"
        )

    @property
    def scale_up_line(self) -> str:
        def seconds(value: float | None) -> str:
            return "none measured" if value is None else f"{value:.1f} s"

        ratio = self.multi_pod_ratio
        return (
            f"e2e scale-ups to one world size: several pods in one write "
            f"{seconds(self.multi_pod_scale_up)}, one pod {seconds(self.one_pod_scale_up)}"
            + ("" if ratio is None else f" (ratio {ratio:.2f})")
        )

    @property
    def node_lost_missed(self) -> bool:
        lost = self.node_lost
        return lost is not None and lost.stall_seconds > (lost.target_seconds or 0.0)

    @property
    def node_lost_line(self) -> str:
        if self.node_lost is None:
            return "e2e node lost: none measured"
        return (
            f"e2e node lost: training again after {self.node_lost.stall_seconds:.1f} s (target"
            f" {self.node_lost.target_seconds or 0.0:.1f} s: the collective timeout plus one"
            " re-form)"
        )


NODE_LOST = "node lost"


def _worst_multi_pod(rescales: Sequence[Rescale]) -> tuple[float | None, float | None]:
    """(multi-pod stall, median one-pod stall to the same world) of the worst such pair."""
    pairs: list[tuple[float | None, float | None]] = []
    for multi in (r for r in rescales if r.pods_added > 1):
        same = [r.stall_seconds for r in rescales if r.pods_added == 1 and r.world == multi.world]
        if same:
            pairs.append((multi.stall_seconds, statistics.median(same)))
    return max(pairs, key=lambda pair: (pair[0] or 0) / (pair[1] or 1), default=(None, None))


def summarise(measured: Sequence[Rescale], *, lost_jobs: int) -> Summary:
    """The rescales' and kills' figures. A node gone silent is apart: its peers recover
    through their collective timeout, which the example sets, and it has a line and target of its
    own.
    Everything after it (its pods replaced, the world grown back) counts as any rescale."""
    rescales = [rescale for rescale in measured if rescale.cause != NODE_LOST]
    stalls = [rescale.stall_seconds for rescale in rescales] or [0.0]
    lost_node = [r for r in measured if r.cause == NODE_LOST]
    multi, one_pod = _worst_multi_pod(rescales)
    return Summary(
        rescales=len(rescales),
        median_stall=statistics.median(stalls),
        max_stall=max(stalls),
        lost_jobs=lost_jobs,
        steps_redone=sum(rescale.steps_redone for rescale in rescales),
        multi_pod_scale_up=multi,
        one_pod_scale_up=one_pod,
        node_lost=max(
            lost_node, key=lambda r: r.stall_seconds - (r.target_seconds or 0.0), default=None
        ),
    )
