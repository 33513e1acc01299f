"""Which worker indices an elastic torchrun job keeps when its count changes: the one rule the
operator and the simulator share."""

import pytest

from autoscaler.api.worker_indices import leaving, lowest_free


@pytest.mark.parametrize(
    ("placed", "keep", "order"),
    [
        pytest.param({0: "a", 1: "a", 2: "a"}, 1, [2, 1], id="one node: the highest index first"),
        pytest.param(
            {0: "a", 1: "b", 2: "a", 3: "a", 4: "b"}, 3, [4, 1], id="emptiest node, wholly"
        ),
        pytest.param({0: "a", 1: None, 2: "b", 3: None}, 2, [3, 1], id="workers on no node first"),
        pytest.param({0: "a", 1: "b", 2: "b"}, 1, [2, 1], id="index 0 outlasts its emptier node"),
        pytest.param({0: "a", 1: "b"}, 0, [1, 0], id="index 0 goes last"),
        pytest.param(
            {0: "a", 1: "b", 2: "b", 3: "a"}, 2, [2, 1], id="worker-0's node emptied last, on a tie"
        ),
        pytest.param(
            {0: "a", 1: "a", 2: "b", 3: "b", 4: "b"}, 2, [4, 3, 2], id="worker-0's node last"
        ),
        pytest.param({0: "a", 3: "b", 5: "b"}, 3, [], id="nothing goes at the count"),
        pytest.param({2: "a", 5: "a"}, 5, [], id="nothing goes below the count"),
    ],
)
def test_leaving_order(placed: dict[int, str | None], keep: int, order: list[int]) -> None:
    assert leaving(placed, keep=keep) == order


@pytest.mark.parametrize(
    ("taken", "count", "free"),
    [
        pytest.param(set(), 2, [0, 1], id="none taken"),
        pytest.param({0, 2, 3}, 2, [1, 4], id="gaps first"),
        pytest.param({0, 1}, 0, [], id="none wanted"),
    ],
)
def test_lowest_free(taken: set[int], count: int, free: list[int]) -> None:
    assert lowest_free(taken, count=count) == free
