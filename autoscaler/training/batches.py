"""Which samples a torchft replica group trains at a step (pure, standard library only).

Every group agrees on torchft's committed-step and committed-batch counters (a joining group
receives them with the state), so slicing the job's samples by them trains each sample once: a
step that does not commit is applied by nobody, and its samples are the next step's.
"""

from dataclasses import dataclass
from typing import Literal

BatchMode = Literal["per-group", "global"]


@dataclass(frozen=True)
class Step:
    """One step as this group trains it. `number` counts the job's committed steps before it."""

    number: int
    first_sample: int  # this group's slice of the step's samples starts here
    size: int  # and is this long (a healing group trains a throw-away slice of the same size)
    participants: int
    participating: bool  # False while the group heals: its gradients count as zero


def plan_step(
    *,
    number: int,
    batches_committed: int,
    rank: int | None,
    participants: int,
    batch_size: int,
    batch: BatchMode,
) -> Step:
    """Which samples this group trains at a step (pure): `per-group` batches are numbered by
    torchft's committed-batch counter; a `global` batch is step `number`'s, split into
    near-equal consecutive slices."""
    participants = max(participants, 1)
    slot = 0 if rank is None else rank
    if batch == "per-group":
        first, size = (batches_committed + slot) * batch_size, batch_size
    else:
        base, extra = divmod(batch_size, participants)
        first = number * batch_size + slot * base + min(slot, extra)
        size = base + (1 if slot < extra else 0)
    return Step(number, first, size, participants, participating=rank is not None)


def samples_done(*, number: int, batches_committed: int, batch_size: int, batch: BatchMode) -> int:
    """The job's samples trained in all committed steps."""
    return (batches_committed if batch == "per-group" else number) * batch_size
