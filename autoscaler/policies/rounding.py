"""Float to count: a value a few ulps from a whole number is that number.

A share of a cluster that is exactly 2 GPUs in real arithmetic comes out of a fitted exponent
(dot products whose last bits depend on the BLAS kernel the processor selects) as 1.9999999999999996
on one machine and 2.0000000000000004 on another; a bare `int()` or `math.ceil` then hands out a
different count on each. Every float-to-count conversion in the policies, the engine and the
simulator goes through `floor_count` or `ceil_count`, so a decision never hangs on those bits.
"""

import math

# Relative: far above float64's accumulated rounding (~1e-15), far below any real fraction of a
# worker at the counts a cluster runs (a millionth of a worker at 1,000 workers).
RELATIVE_SLACK = 1e-9


def _snapped(value: float) -> float:
    """`value`, or the whole number within the slack of it."""
    if not math.isfinite(value):
        raise ValueError(f"no count for {value!r}")
    nearest = float(round(value))
    return nearest if abs(value - nearest) <= RELATIVE_SLACK * max(1.0, abs(value)) else value


def floor_count(value: float) -> int:
    """The largest whole number at or below `value`, a value within the slack of one above it
    counting as that one."""
    return math.floor(_snapped(value))


def ceil_count(value: float) -> int:
    """The smallest whole number at or above `value`, a value within the slack of one below it
    counting as that one."""
    return math.ceil(_snapped(value))
