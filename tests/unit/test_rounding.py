"""Float to count: whole numbers a few ulps off are that number; real fractions are not."""

import math

import pytest

from autoscaler.policies.rounding import ceil_count, floor_count


@pytest.mark.parametrize(
    ("value", "floor", "ceil"),
    [
        (2.0, 2, 2),
        (math.nextafter(2.0, 0.0), 2, 2),  # a BLAS kernel's 1.9999999999999998 is 2
        (math.nextafter(2.0, 3.0), 2, 2),
        (2.0 * (1 - 1e-12), 2, 2),
        (1000.0 * (1 + 1e-12), 1000, 1000),  # relative: the slack grows with the count
        (2.5, 2, 3),
        (2.0 + 1e-6, 2, 3),  # a millionth of a worker is a real fraction
        (2.0 - 1e-6, 1, 2),
        (0.0, 0, 0),
        (1e-12, 0, 0),
        (0.3, 0, 1),
        (-0.5, -1, 0),
    ],
)
def test_counts_snap_only_within_the_slack(value: float, floor: int, ceil: int) -> None:
    assert (floor_count(value), ceil_count(value)) == (floor, ceil)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_no_count_for_a_value_that_is_no_number(value: float) -> None:
    with pytest.raises(ValueError, match="no count"):
        floor_count(value)
