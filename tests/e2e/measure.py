"""What a training run's event log says about rescales: stalls, redone steps, world sizes.

The example training script (`examples/elastic-training/train.py --events FILE`) appends one JSON
line per event and process: `start`, `resume` (the checkpoint step it continues from), `step`
(every optimizer step, with the world size), `checkpoint` (rank 0) and `done`. Pure functions
of those lines, so the figures can be checked on a table of events.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]


def first_full_step(events: Sequence[Event], *, world: int, after: float) -> float | None:
    """When every rank of a `world`-sized world started after `after` had completed a step.

    Only processes started after `after` count: torchrun restarts every worker on a membership
    change, so the old world's last steps never pass for the new world's first."""
    started = {e["pid"] for e in events if e["event"] == "start" and e["time"] > after}
    firsts: dict[int, float] = {}
    for event in events:
        if event["event"] == "step" and event["world"] == world and event["pid"] in started:
            firsts.setdefault(event["rank"], event["time"])
            if len(firsts) == world:
                return max(firsts.values())
    return None


def stall(events: Sequence[Event], *, world: int, after: float) -> float | None:
    """Seconds from a change at `after` (a /scale write, a kill) to all ranks stepping at `world`."""
    done = first_full_step(events, world=world, after=after)
    return None if done is None else done - after


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

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


@dataclass(frozen=True)
class Summary:
    rescales: int
    median_stall: float
    max_stall: float
    lost_jobs: int
    steps_redone: int

    @property
    def line(self) -> str:
        return (
            f"e2e: rescales {self.rescales}, median stall {self.median_stall:.1f} s, "
            f"max stall {self.max_stall:.1f} s, lost jobs {self.lost_jobs}, "
            f"steps redone {self.steps_redone}"
        )


NODE_LOST = "node lost"


def summarise(measured: Sequence[Rescale], *, lost_jobs: int) -> Summary:
    """The rescales' and kills' figures. A lost node is left out: how soon its pods are
    released is the cluster's (the pod garbage collector runs every 20 s), and its recovery is
    bounded and reported on its own."""
    rescales = [rescale for rescale in measured if rescale.cause != NODE_LOST]
    stalls = [rescale.stall_seconds for rescale in rescales] or [0.0]
    return Summary(
        rescales=len(rescales),
        median_stall=statistics.median(stalls),
        max_stall=max(stalls),
        lost_jobs=lost_jobs,
        steps_redone=sum(rescale.steps_redone for rescale in rescales),
    )
