"""Which samples a torchft replica group trains at a step: every sample once, by the counters
every group agrees on."""

import pytest

from autoscaler.training.batches import BatchMode, Step, plan_step, samples_done


@pytest.mark.parametrize(
    ("batch", "counters", "rank", "participants", "expected"),
    [
        # per-group: each group trains 128 samples; batches numbered by torchft's counter
        ("per-group", (10, 25), 0, 3, Step(10, 25 * 128, 128, 3, participating=True)),
        ("per-group", (10, 25), 2, 3, Step(10, 27 * 128, 128, 3, participating=True)),
        ("per-group", (10, 25), None, 3, Step(10, 25 * 128, 128, 3, participating=False)),
        # global: step 4's 128 samples split 43/43/42 over three groups
        ("global", (4, 9), 0, 3, Step(4, 512, 43, 3, participating=True)),
        ("global", (4, 9), 1, 3, Step(4, 555, 43, 3, participating=True)),
        ("global", (4, 9), 2, 3, Step(4, 598, 42, 3, participating=True)),
        ("global", (4, 9), 0, 1, Step(4, 512, 128, 1, participating=True)),
    ],
)
def test_a_groups_slice_of_a_step(
    batch: BatchMode,
    counters: tuple[int, int],
    rank: int | None,
    participants: int,
    expected: Step,
) -> None:
    number, committed = counters
    step = plan_step(
        number=number,
        batches_committed=committed,
        rank=rank,
        participants=participants,
        batch_size=128,
        batch=batch,
    )
    assert step == expected


@pytest.mark.parametrize("batch", ["per-group", "global"])
@pytest.mark.parametrize("participants", [1, 2, 3, 4])
def test_the_participants_slices_tile_the_step_without_overlap(
    batch: BatchMode, participants: int
) -> None:
    slices = [
        plan_step(
            number=7,
            batches_committed=20,
            rank=rank,
            participants=participants,
            batch_size=100,
            batch=batch,
        )
        for rank in range(participants)
    ]
    covered = [i for s in slices for i in range(s.first_sample, s.first_sample + s.size)]
    assert len(covered) == len(set(covered))
    done = samples_done(number=7, batches_committed=20, batch_size=100, batch=batch)
    assert min(covered) == done  # a step starts where the committed ones end
    after = samples_done(number=8, batches_committed=20 + participants, batch_size=100, batch=batch)
    assert max(covered) + 1 == after  # and the next step starts where it ends
