"""The allocation solver: hand instances, and random non-concave instances against scipy's MILP."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

from autoscaler.policies.solver import (
    Allocation,
    InsufficientCapacity,
    greedy_allocation,
    solve_allocation,
)
from autoscaler.policies.solver_core import search_core

NEG = -np.inf


@dataclass(frozen=True)
class Instance:
    values: list[np.ndarray]
    lows: np.ndarray
    sizes: np.ndarray
    capacity: float

    def kwargs(self) -> dict[str, Any]:
        return {
            "values": self.values,
            "lows": self.lows,
            "sizes": self.sizes,
            "capacity": self.capacity,
        }


def instance(
    values: Sequence[Sequence[float]], lows: Sequence[int], sizes: Sequence[float], capacity: float
) -> Instance:
    return Instance(
        [np.asarray(v, dtype=float) for v in values],
        np.asarray(lows, dtype=np.int64),
        np.asarray(sizes, dtype=float),
        float(capacity),
    )


def realised(inst: Instance, counts: np.ndarray) -> float:
    return float(sum(v[c - lo] for v, c, lo in zip(inst.values, counts, inst.lows, strict=True)))


def assert_feasible(inst: Instance, alloc: Allocation) -> None:
    counts = alloc.counts
    assert counts.dtype == np.int64
    assert counts.shape == (len(inst.values),)
    for v, c, lo in zip(inst.values, counts, inst.lows, strict=True):
        assert lo <= c < lo + len(v)
        assert np.isfinite(v[c - lo])
    assert float(counts @ inst.sizes) <= inst.capacity + 1e-9 * max(1.0, inst.capacity)
    assert alloc.value == pytest.approx(realised(inst, counts), rel=1e-12, abs=1e-12)
    assert alloc.upper_bound >= alloc.value
    assert alloc.gap >= 0


def milp_optimum(inst: Instance) -> float:
    """The binary MCKP: x[j, n] in {0, 1}, sum_n x[j, n] = 1, sum n * size * x <= C."""
    job, profit, weight = [], [], []
    for j, (v, lo, size) in enumerate(zip(inst.values, inst.lows, inst.sizes, strict=True)):
        for k in np.flatnonzero(np.isfinite(v)):
            job.append(j)
            profit.append(v[k])
            weight.append((lo + k) * size)
    n = len(job)
    one_each = csr_array((np.ones(n), (job, np.arange(n))), shape=(len(inst.values), n))
    constraints = [
        LinearConstraint(one_each, 1, 1),
        LinearConstraint(
            np.asarray(weight)[None, :], -np.inf, inst.capacity + 1e-9 * max(1.0, inst.capacity)
        ),
    ]
    res = milp(
        -np.asarray(profit),
        constraints=constraints,
        integrality=np.ones(n),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 1e-12},
    )
    assert res.success, res.message
    return float(-res.fun)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-7 * max(1.0, abs(b))


# -- hand instances -------------------------------------------------------------------------------

# (id, instance, expected counts, expected value)
TABLE = [
    (
        # Job 0 only pays off at 3 workers (flat, then a jump); job 1 is concave. Greedy never
        # starts job 0 (no positive first step) and gives job 1 everything: 5.5 instead of 10.
        "non-concave-beats-greedy",
        instance([[0, 0, 0, 10], [0, 4, 5, 5.5]], [0, 0], [1, 1], 3),
        [3, 0],
        10.0,
    ),
    (
        "zero-size-job-takes-its-best-count",
        instance([[1, 5, 3], [0, 1, 2]], [1, 0], [0, 1], 2),
        [2, 2],
        7.0,
    ),
    (
        "forbidden-counts",
        # Job 0 may run 2 or 4 workers only; job 1 wants as many as it can get.
        instance([[NEG, 2, NEG, 5], [0, 1, 2, 3, 4]], [1, 0], [1, 1], 5),
        [4, 1],
        6.0,
    ),
    (
        "negative-profits",
        # -1/speedup (Pollux p = -1): a second worker for each beats a third for the fast job.
        instance([[-1, -1 / 1.9, -1 / 2.7], [-1, -1 / 1.2, -1 / 1.3]], [1, 1], [1, 1], 4),
        [2, 2],
        -1 / 1.9 - 1 / 1.2,
    ),
    (
        "capacity-exactly-filled",
        instance([[0, 3, 4], [0, 1, 7]], [0, 0], [2, 4], 10),
        [1, 2],
        10.0,
    ),
    (
        "float-sizes",
        # 1 x 0.5 + 2 x 1.5 fills 3.5 exactly and beats 4 x 0.5 + 1 x 1.5.
        instance([[1, 2, 3, 4], [1, 5, 6]], [1, 1], [0.5, 1.5], 3.5),
        [1, 2],
        6.0,
    ),
    (
        "node-boundary-drop",
        # Past 4 workers job 0 spans two nodes and runs slower: it stops at the boundary.
        instance([[1, 1.9, 2.7, 3.4, 3.0, 3.2, 3.3, 3.35], [1, 2, 3, 4, 4.5]], [1, 1], [1, 1], 9),
        [4, 5],
        7.9,
    ),
    (
        "spike-at-current-count",
        # Job 0 runs 2 workers now; any other count pays a restart cost.
        instance([[0.9, 2.0, 2.5, 2.9], [0.9, 1.8, 2.6, 3.3]], [1, 1], [1, 1], 5),
        [2, 3],
        4.6,
    ),
]


@pytest.mark.parametrize(
    ("inst", "counts", "value"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_hand_instances(inst: Instance, counts: list[int], value: float) -> None:
    alloc = solve_allocation(**inst.kwargs())
    assert_feasible(inst, alloc)
    assert alloc.counts.tolist() == counts
    assert alloc.value == pytest.approx(value)
    assert alloc.exact
    assert alloc.upper_bound == alloc.value
    assert alloc.value == pytest.approx(milp_optimum(inst))


def test_greedy_is_strictly_worse_on_a_non_concave_curve() -> None:
    inst = TABLE[0][1]
    greedy = greedy_allocation(**inst.kwargs())
    assert greedy.counts.tolist() == [0, 3]
    assert greedy.value == 5.5
    assert not greedy.exact  # its bound is the LP's, and it does not reach it
    assert greedy.upper_bound >= 10.0


def test_greedy_is_exact_on_concave_curves() -> None:
    inst = instance([[1, 1.8, 2.4, 2.8], [2, 2.5, 2.9, 3.1]], [1, 1], [1, 1], 5)
    greedy = greedy_allocation(**inst.kwargs())
    assert greedy.counts.tolist() == [3, 2]
    assert greedy.exact


def test_insufficient_capacity() -> None:
    inst = instance([[1, 2], [NEG, 1, 2]], [2, 1], [4, 2], 11)  # needs 2*4 + 2*2 = 12
    for solve in (solve_allocation, greedy_allocation):
        with pytest.raises(InsufficientCapacity, match=r"need 12 but the capacity is 11"):
            solve(**inst.kwargs())


@pytest.mark.parametrize(
    ("values", "lows", "sizes", "capacity", "max_gap", "message"),
    [
        ([[NEG, NEG]], [1], [1], 4, 0.0, "at least one finite value per job"),
        ([[1, np.nan]], [1], [1], 4, 0.0, "finite or -inf"),
        ([[1, np.inf]], [1], [1], 4, 0.0, "finite or -inf"),
        ([[]], [1], [1], 4, 0.0, "non-empty 1-D"),
        ([[1, 2]], [1, 1], [1], 4, 0.0, "1 value curves but lows"),
        ([[1, 2]], [-1], [1], 4, 0.0, "non-negative integers"),
        ([[1, 2]], [1.5], [1], 4, 0.0, "non-negative integers"),
        ([[1, 2]], [1], [-1], 4, 0.0, "sizes must be finite and non-negative"),
        ([[1, 2]], [1], [1], np.nan, 0.0, "capacity finite"),
        ([[1, 2]], [1], [1], 4, 1.0, r"max_gap must be in \[0, 1\)"),
        ([[1, 2]], [1], [1], 4, -0.1, r"max_gap must be in \[0, 1\)"),
    ],
)
def test_invalid_input(
    *,
    values: list[list[float]],
    lows: list[float],
    sizes: list[float],
    capacity: float,
    max_gap: float,
    message: str,
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        solve_allocation(
            values=[np.asarray(v, dtype=float) for v in values],
            lows=np.asarray(lows),
            sizes=np.asarray(sizes, dtype=float),
            capacity=capacity,
            max_gap=max_gap,
        )
    assert not isinstance(info.value, InsufficientCapacity)


def test_no_jobs() -> None:
    alloc = solve_allocation(
        values=[], lows=np.zeros(0, dtype=np.int64), sizes=np.zeros(0), capacity=8
    )
    assert alloc.counts.tolist() == []
    assert alloc.value == 0
    assert alloc.exact


def test_ties_prefer_the_smaller_count_and_are_deterministic() -> None:
    inst = instance([[1, 1, 1], [2, 2, 3]], [1, 1], [1, 1], 6)
    first = solve_allocation(**inst.kwargs())
    assert first.counts.tolist() == [1, 3]
    again = solve_allocation(**inst.kwargs())
    assert np.array_equal(first.counts, again.counts)


@pytest.mark.parametrize(("capacity", "better"), [(5.0, True), (-1.0, False)])
def test_an_empty_core_still_offers_the_fixed_jobs(capacity: float, better: bool) -> None:
    """When reduced costs fix every job, those items together may beat the incumbent."""
    found = search_core(
        np.zeros((0, 3)),
        np.zeros((0, 3)),
        capacity=capacity,
        base=7.0,
        incumbent=6.0,
        floor_of=lambda v: v,
        tol=1e-9,
        max_states=100,
    )
    assert (found.pos is not None) == better
    assert found.value == (7.0 if better else 6.0)


# -- random non-concave instances against the MILP ------------------------------------------------


def random_curve(rng: np.random.Generator, length: int, negative: bool) -> np.ndarray:
    """A speedup-like curve of one of several non-concave shapes, or its -1/s form."""
    n = np.arange(1, length + 1, dtype=float)
    shape = rng.integers(5)
    if shape == 0:  # random walk, not necessarily increasing
        s = 1 + np.cumsum(rng.normal(0.5, 1.0, length)).clip(-0.9)
    elif shape == 1:  # node boundary every 4 or 8 workers
        node = rng.choice([4, 8])
        s = n / (1 + 0.05 * n) * rng.uniform(0.6, 0.9) ** ((n - 1) // node)
    elif shape == 2:  # the current count is a spike: every other count pays a restart cost
        s = np.log1p(n) * rng.uniform(0.5, 2)
        s *= np.where(np.arange(length) == rng.integers(length), 1.0, rng.uniform(0.7, 0.95))
    elif shape == 3:  # concave, diminishing returns
        s = n ** rng.uniform(0.3, 0.9)
    else:  # flat, then a jump
        s = np.where(n >= rng.integers(1, length + 1), rng.uniform(2, 6), 1.0)
    s = np.maximum(s, 0.05) * rng.uniform(0.5, 2.0)
    values = -1 / s if negative else s
    if length > 1 and rng.random() < 0.3:
        values[rng.integers(length, size=rng.integers(1, max(2, length // 3)))] = NEG
    if not np.isfinite(values).any():
        values[rng.integers(length)] = -1.0 if negative else 1.0
    return values


def random_instance(seed: int) -> Instance:
    rng = np.random.default_rng(seed)
    jobs = int(rng.integers(1, 31))
    negative = bool(rng.random() < 0.4)
    values = [random_curve(rng, int(rng.integers(1, 17)), negative) for _ in range(jobs)]
    lows = rng.integers(0, 4, jobs)
    if rng.random() < 0.6:
        sizes = rng.choice(
            [0, 0.5, 1, 1.5, 2, 4, 8], jobs, p=[0.05, 0.1, 0.35, 0.05, 0.2, 0.15, 0.1]
        )
    else:
        sizes = rng.choice([1.0, 2.0, 4.0, 8.0], jobs)
    first = np.array([np.argmax(np.isfinite(v)) for v in values])
    least = float(((lows + first) * sizes).sum())
    most = float(((lows + np.array([len(v) for v in values]) - 1) * sizes).sum())
    capacity = least + rng.uniform(0, 1.1) * (most - least)
    if rng.random() < 0.7:
        capacity = max(least, float(np.floor(capacity)))
    return Instance(values, lows.astype(np.int64), sizes.astype(float), capacity)


def quality(value: float, optimum: float) -> float:
    """value / optimum as a ratio <= 1 when value is worse, for either sign of the objective."""
    if optimum == 0:
        return 1.0 if value == 0 else -np.inf
    return value / optimum if optimum > 0 else optimum / value


SEEDS = range(300)


@pytest.mark.parametrize("seed", SEEDS)
def test_exact_matches_milp(seed: int) -> None:
    inst = random_instance(seed)
    optimum = milp_optimum(inst)
    exact = solve_allocation(**inst.kwargs())
    assert_feasible(inst, exact)
    assert close(exact.value, optimum), (exact.value, optimum)
    assert exact.exact
    assert exact.upper_bound == exact.value

    greedy = greedy_allocation(**inst.kwargs())
    assert_feasible(inst, greedy)
    assert greedy.value <= exact.value + 1e-9 * max(1.0, abs(exact.value))
    assert greedy.upper_bound >= optimum - 1e-7 * max(1.0, abs(optimum))  # the LP bound is honest


@pytest.mark.parametrize("max_gap", [1e-3, 0.05])
@pytest.mark.parametrize("seed", range(0, 300, 3))
def test_gap_is_honest(seed: int, max_gap: float) -> None:
    inst = random_instance(seed)
    optimum = milp_optimum(inst)
    alloc = solve_allocation(**inst.kwargs(), max_gap=max_gap)
    assert_feasible(inst, alloc)
    slack = 1e-7 * max(1.0, abs(optimum))
    assert alloc.upper_bound >= optimum - slack
    assert alloc.value <= optimum + slack
    assert alloc.gap <= max_gap + 1e-9
    assert alloc.value >= optimum - max_gap * abs(alloc.upper_bound) - slack


def test_larger_instance_matches_milp() -> None:
    """More jobs and longer ranges than the property tests, so the core search has work to do."""
    rng = np.random.default_rng(2024)
    jobs = 120
    values = [random_curve(rng, int(rng.integers(8, 33)), negative=False) for _ in range(jobs)]
    sizes = rng.choice([1.0, 2.0, 4.0, 8.0], jobs)
    inst = Instance(values, np.ones(jobs, dtype=np.int64), sizes, 700.0)
    alloc = solve_allocation(**inst.kwargs())
    assert_feasible(inst, alloc)
    assert close(alloc.value, milp_optimum(inst))
