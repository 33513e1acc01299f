"""Worker counts for every job under one capacity: an exact multiple-choice knapsack solver.

Job j takes exactly one count n in [lows[j], lows[j] + len(values[j]) - 1], uses n * sizes[j] of
the capacity and earns values[j][n - lows[j]] (-inf: not allowed). `solve_allocation` maximises
the total; the curves need not be concave (node boundaries, a rescale cost that makes the current
count a spike), which is where the marginal-gain greedy (`greedy_allocation`, Optimus/Fox) fails.

Method: LP relaxation via the jobs' upper concave envelopes (the multiplier lambda and an upper
bound), a rounded incumbent, reduced-cost fixing, then a bounded Pareto DP on the few jobs left
undecided (`solver_core`). Pure numpy; deterministic.
"""

import dataclasses
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoscaler.policies.solver_core import fix, search_core, threshold
from autoscaler.policies.solver_lp import (
    Floats,
    Ints,
    continue_greedy,
    effective_capacity,
    fill,
    lightest,
    pad,
    relax,
    undominated,
)

EXACT_GAP = 1e-9
# Profits within this share of the total are treated as equal (the bounds are float sums).
_PROFIT_TOL = 1e-10
# With max_gap > 0 the core DP gives up (reporting its open bound) beyond this many states.
_MAX_STATES_APPROX = 200_000

__all__ = ["Allocation", "InsufficientCapacity", "greedy_allocation", "solve_allocation"]


@dataclass(frozen=True)
class Allocation:
    counts: Ints  # the chosen worker count of every job
    value: float  # sum_j values[j][counts[j] - lows[j]]
    upper_bound: float  # proven: no feasible choice is worth more (== value when proven optimal)

    @property
    def gap(self) -> float:
        return max(0.0, (self.upper_bound - self.value) / max(abs(self.upper_bound), 1e-12))

    @property
    def exact(self) -> bool:
        return self.gap <= EXACT_GAP


class InsufficientCapacity(ValueError):  # noqa: N818 - the public name callers catch
    """Even the cheapest allowed count of every job does not fit in the capacity."""


@dataclass(frozen=True)
class _Problem:
    values: Floats  # J x K, -inf past each job's range and at forbidden counts
    weight: Floats  # J x K: resource used by each count
    lows: Ints
    sizes: Floats
    capacity: float
    tol: float  # capacity slack for float sums
    ptol: float  # profit slack for float sums

    def value(self, pos: Ints) -> float:
        return float(self.values[np.arange(len(pos)), pos].sum())

    def allocation(self, pos: Ints, *, upper_bound: float) -> Allocation:
        value = self.value(pos)
        return Allocation(self.lows + pos, value, max(value, upper_bound))


def _problem(values: Sequence[Floats], lows: Ints, sizes: Floats, capacity: float) -> _Problem:
    """Validate the inputs and lay them out as padded tables."""
    lows_ = np.asarray(lows)
    sizes_ = np.asarray(sizes, dtype=np.float64)
    jobs = len(values)
    if lows_.shape != (jobs,) or sizes_.shape != (jobs,):
        raise ValueError(f"{jobs} value curves but lows {lows_.shape} and sizes {sizes_.shape}")
    if jobs and (not np.all(lows_ == np.round(lows_)) or lows_.min() < 0):
        raise ValueError("lows must be non-negative integers")
    if not (np.all(np.isfinite(sizes_)) and np.all(sizes_ >= 0) and math.isfinite(capacity)):
        raise ValueError("sizes must be finite and non-negative, and the capacity finite")
    if any(np.ndim(row) != 1 or len(row) == 0 for row in values):
        raise ValueError("every value curve must be a non-empty 1-D array")
    table = pad(values, max((len(row) for row in values), default=1))
    finite = np.isfinite(table)
    if np.isnan(table).any() or (table == np.inf).any() or not finite.any(axis=1).all():
        raise ValueError("values must be finite or -inf, with at least one finite value per job")
    lows_ = lows_.astype(np.int64)
    weight = (lows_[:, None] + np.arange(table.shape[1])) * sizes_[:, None]
    scale = float(np.abs(np.where(finite, table, 0.0)).max(axis=1, initial=0.0).sum())
    tol = 1e-9 * max(1.0, abs(capacity))
    return _Problem(table, weight, lows_, sizes_, capacity, tol, _PROFIT_TOL * (1.0 + scale))


def _check_capacity(problem: _Problem) -> None:
    rows = np.arange(len(problem.values))
    need = float(problem.weight[rows, lightest(problem.values)].sum())
    if need > problem.capacity + problem.tol:
        raise InsufficientCapacity(
            f"the smallest allowed counts need {need:g} but the capacity is {problem.capacity:g}"
        )


def solve_allocation(
    *,
    values: Sequence[Floats],
    lows: Ints,
    sizes: Floats,
    capacity: float,
    max_gap: float = 0.0,
) -> Allocation:
    """The best count for every job; provably optimal unless `max_gap` allows a relative gap.

    With max_gap > 0 the search stops once the incumbent is within that gap of a proven bound,
    and `upper_bound` reports that bound. Raises InsufficientCapacity, ValueError.
    """
    if not 0.0 <= max_gap < 1.0:
        raise ValueError(f"max_gap must be in [0, 1), got {max_gap}")
    problem = _problem(values, lows, sizes, float(capacity))
    _check_capacity(problem)
    if not len(values):
        return problem.allocation(np.zeros(0, dtype=np.int64), upper_bound=0.0)
    profit = undominated(problem.values, problem.sizes)
    capacity = effective_capacity(
        profit, problem.weight, capacity=problem.capacity, tol=problem.tol
    )
    problem = dataclasses.replace(problem, capacity=capacity)
    lp = relax(profit, problem.weight, capacity=capacity, tol=problem.tol)
    pos = continue_greedy(lp.later, problem.weight, lp.pos, capacity=capacity, tol=problem.tol)
    pos = fill(profit, problem.weight, pos, capacity=capacity, tol=problem.tol)
    value = problem.value(pos)
    if lp.integral or lp.bound <= threshold(value, max_gap) + problem.ptol:
        upper = value if max_gap == 0 else lp.bound
        return problem.allocation(pos, upper_bound=upper)
    return _solve_core(problem, profit, pos, lam=lp.lam, lp_bound=lp.bound, max_gap=max_gap)


def _solve_core(
    problem: _Problem, profit: Floats, pos: Ints, *, lam: float, lp_bound: float, max_gap: float
) -> Allocation:
    """Fix what reduced costs decide, search the rest exactly, and assemble the answer."""

    def floor_of(v: float) -> float:
        return threshold(v, max_gap) + problem.ptol

    value = problem.value(pos)
    kept = fix(profit, problem.weight, lam=lam, capacity=problem.capacity, floor=floor_of(value))
    options = np.isfinite(kept).sum(axis=1)
    if not options.all():  # some job has no item that could beat the incumbent
        return _answer(problem, pos, bound=floor_of(value), lp_bound=lp_bound, max_gap=max_gap)
    core = np.flatnonzero(options > 1)
    rows = np.arange(len(kept))
    fixed = lightest(kept)
    base = float(np.where(options == 1, kept[rows, fixed], 0.0).sum())
    used = float(np.where(options == 1, problem.weight[rows, fixed], 0.0).sum())
    found = search_core(
        kept[core],
        problem.weight[core],
        capacity=problem.capacity - used,
        base=base,
        incumbent=value,
        floor_of=floor_of,
        tol=problem.tol,
        max_states=_MAX_STATES_APPROX if max_gap > 0 else np.iinfo(np.int64).max,
    )
    if found.pos is not None:
        pos = fixed
        pos[core] = found.pos
    return _answer(problem, pos, bound=found.bound, lp_bound=lp_bound, max_gap=max_gap)


def _answer(
    problem: _Problem, pos: Ints, *, bound: float, lp_bound: float, max_gap: float
) -> Allocation:
    if max_gap == 0:  # everything dropped was proven not to beat the answer
        return problem.allocation(pos, upper_bound=-np.inf)
    return problem.allocation(pos, upper_bound=min(lp_bound, bound))


def greedy_allocation(
    *, values: Sequence[Floats], lows: Ints, sizes: Floats, capacity: float
) -> Allocation:
    """Marginal-gain greedy (Optimus; Fox 1966): optimal for concave curves, a heuristic otherwise.

    Every job starts at its lowest allowed count; the next allowed count goes to the job with the
    largest gain per unit of resource that still fits, until nothing fits or no gain is positive.
    `upper_bound` is the LP (concave envelope) bound, so `exact` is only claimed when greedy
    provably reached the optimum.
    """
    problem = _problem(values, lows, sizes, float(capacity))
    _check_capacity(problem)
    if not len(values):
        return problem.allocation(np.zeros(0, dtype=np.int64), upper_bound=0.0)
    pos = _greedy(problem)
    profit = undominated(problem.values, problem.sizes)
    lp = relax(profit, problem.weight, capacity=problem.capacity, tol=problem.tol)
    return problem.allocation(pos, upper_bound=lp.bound)


def _greedy(problem: _Problem) -> Ints:
    finite = np.isfinite(problem.values)
    width = finite.shape[1]
    # nxt[j][k]: the next allowed column after k (width: none).
    later = np.where(finite, np.arange(width), width)
    nxt = np.minimum.accumulate(later[:, ::-1], axis=1)[:, ::-1]
    nxt_rows = np.concatenate([nxt[:, 1:], np.full((len(nxt), 1), width)], axis=1).tolist()
    table, weight = problem.values.tolist(), problem.weight.tolist()
    pos = lightest(problem.values).tolist()
    room = problem.capacity - sum(w[k] for w, k in zip(weight, pos, strict=True))
    heap: list[tuple[float, int]] = []

    def push(j: int) -> None:
        k, n = pos[j], nxt_rows[j][pos[j]]
        if n < width and table[j][n] > table[j][k]:
            step = weight[j][n] - weight[j][k]
            rate = (table[j][n] - table[j][k]) / step if step > 0 else math.inf
            heapq.heappush(heap, (-rate, j))

    for j in range(len(pos)):
        push(j)
    while heap:
        _, j = heapq.heappop(heap)
        n = nxt_rows[j][pos[j]]
        step = weight[j][n] - weight[j][pos[j]]
        if step > room + problem.tol:
            continue  # the room only shrinks: this job is done
        room -= step
        pos[j] = n
        push(j)
    return np.asarray(pos, dtype=np.int64)
