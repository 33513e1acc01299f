"""`python -m tests.suite` (`make test`): the whole suite in two phases, each phase's minutes
printed, so the suite's budget stays visible.

1. The unit and integration tiers, in three pytest-xdist processes on the two cores, one test
   file each at a time: the integration tier waits on servers for part of its time, which the
   other processes use (a fourth gains nothing). Each process starts its own control plane, as
   its files need one. Files go out in collection order, the integration tier's slow ones
   first and the unit tier's many short ones last, so that no process is left with a long file
   at the end (xdist would order them by their count of tests: `docs/benchmarks.md`, Test
   suite time).
2. The e2e tier alone, in one process: its real training keeps both cores busy, and its figures
   (stalls, pauses, restarts) are measured without another tier's load.

Every phase runs even when an earlier one failed; the exit status is 1 if any failed (pytest's
5, nothing collected, included). Arguments are passed to every phase's pytest."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str
    arguments: tuple[str, ...]


PHASES = (
    Phase(
        "unit and integration tiers",
        ("-m", "not e2e", "-n", "3", "--dist", "loadfile", "--no-loadscope-reorder"),
    ),
    Phase("e2e tier", ("-m", "e2e")),
)


def run(phase: Phase, extra: list[str]) -> tuple[int, float]:
    """The phase's pytest exit status and minutes."""
    print(f"::: {phase.name}", flush=True)
    start = time.monotonic()
    status = subprocess.call([sys.executable, "-m", "pytest", *phase.arguments, *extra])
    return status, (time.monotonic() - start) / 60


def main(extra: list[str]) -> int:
    results = {phase.name: run(phase, extra) for phase in PHASES}
    for name, (status, minutes) in results.items():
        print(f"::: {name}: {minutes:.1f} min, {'passed' if status == 0 else f'exit {status}'}")
    print(f"::: suite: {sum(minutes for _, minutes in results.values()):.1f} min")
    return int(any(status != 0 for status, _ in results.values()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
