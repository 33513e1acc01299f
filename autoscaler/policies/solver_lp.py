"""Item tables and the LP relaxation of the multiple-choice knapsack behind `solver`.

A job's items are its allowed counts: item k of job j is count lows[j] + k, with weight
(lows[j] + k) * sizes[j] and profit values[j][k]. The tables are padded to J x K with -inf.
Dominated items (no lighter than an item that earns at least as much) are dropped: an optimal
solution never needs them. The upper concave envelope of what is left, taken segment by segment
in order of decreasing slope over all jobs, solves the LP relaxation (Sinha & Zoltners 1979);
the slope where capacity runs out is the multiplier lambda of the capacity constraint.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

# Points this close to the best slope count as collinear, so an envelope through linearly
# interpolated curves jumps straight to the far end (far fewer vertices and iterations).
_COLLINEAR = 1e-12


def pad(values: Sequence[Floats], width: int) -> Floats:
    """Rows of unequal length as one J x width table, -inf past each row's end."""
    lengths = np.fromiter((len(row) for row in values), dtype=np.int64, count=len(values))
    table = np.full((len(values), width), -np.inf)
    if lengths.sum():
        rows = np.repeat(np.arange(len(values)), lengths)
        cols = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        table[rows, cols] = np.concatenate([np.asarray(row, dtype=np.float64) for row in values])
    return table


def undominated(profit: Floats, sizes: Floats) -> Floats:
    """`profit` with every dominated item set to -inf (ties keep the smaller count)."""
    before = np.maximum.accumulate(profit, axis=1)
    before = np.concatenate([np.full((len(profit), 1), -np.inf), before[:, :-1]], axis=1)
    keep = profit > before
    # A job of size 0 weighs nothing at every count: only its (first) best count matters.
    free = sizes == 0
    if free.any():
        best = np.argmax(profit[free], axis=1)
        keep[free] = np.arange(profit.shape[1]) == best[:, None]
    return np.where(keep, profit, -np.inf)


def lightest(profit: Floats) -> Ints:
    """Column of each row's first finite item (rows must have one)."""
    first: Ints = np.argmax(np.isfinite(profit), axis=1).astype(np.int64)
    return first


@dataclass(frozen=True)
class Segments:
    """Edges of the upper concave envelopes: job, from item, to item, weight and profit steps."""

    job: Ints
    src: Ints
    dst: Ints
    dw: Floats
    dp: Floats

    @property
    def slope(self) -> Floats:
        return self.dp / self.dw

    def pick(self, index: Ints) -> "Segments":
        return Segments(
            self.job[index], self.src[index], self.dst[index], self.dw[index], self.dp[index]
        )

    def by_slope(self) -> Ints:
        """Order of decreasing slope; ties by job, then by position along the job's envelope."""
        return np.lexsort((self.src, self.job, -self.slope)).astype(np.int64)


def envelope(profit: Floats, weight: Floats) -> Segments:
    """Upper concave envelopes of all rows at once, by gift wrapping from the lightest item.

    Needs undominated items (weight strictly increasing along each row's finite items).
    """
    cur = lightest(profit)
    active = np.flatnonzero(np.isfinite(profit).sum(axis=1) > 1)
    cols = np.arange(profit.shape[1])
    parts: list[tuple[Ints, Ints, Ints]] = []
    while active.size:
        start = cur[active]
        dp = profit[active] - profit[active, start][:, None]
        dw = weight[active] - weight[active, start][:, None]
        ahead = (cols > start[:, None]) & np.isfinite(dp)
        slope = np.divide(dp, dw, out=np.full(dp.shape, -np.inf), where=ahead)
        best = slope.max(axis=1)
        near = ahead & (slope >= best[:, None] - _COLLINEAR * np.abs(best[:, None]))
        nxt = profit.shape[1] - 1 - np.argmax(near[:, ::-1], axis=1)
        more = np.isfinite(best)
        active, start, nxt = active[more], start[more], nxt[more]
        parts.append((active, start, nxt))
        cur[active] = nxt
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Segments(empty, empty, empty, np.zeros(0), np.zeros(0))
    job, src, dst = (np.concatenate(cols_) for cols_ in zip(*parts, strict=True))
    dw = weight[job, dst] - weight[job, src]
    dp = profit[job, dst] - profit[job, src]
    return Segments(job, src, dst, dw, dp)


def lagrangian_bound(profit: Floats, weight: Floats, *, lam: float, capacity: float) -> float:
    """L(lam) = lam * C + sum_j max_k (p_jk - lam * w_jk): an upper bound for every lam >= 0."""
    reduced = profit - lam * weight
    return float(lam * capacity + reduced.max(axis=1).sum())


@dataclass(frozen=True)
class Relaxation:
    """The LP relaxation: its multiplier, its bound and its integral part."""

    lam: float
    bound: float  # L(lam): the LP optimum up to rounding, an upper bound on the integer optimum
    pos: Ints  # each job at the envelope vertex the LP reaches in full (a feasible solution)
    integral: bool  # no job is fractional: `pos` is optimal
    later: Segments  # the segments the LP does not take, by decreasing slope


def relax(profit: Floats, weight: Floats, *, capacity: float, tol: float) -> Relaxation:
    """Solve the LP relaxation over undominated items (Sinha-Zoltners greedy on envelopes)."""
    rows = np.arange(len(profit))
    pos = lightest(profit)
    room = capacity - float(weight[rows, pos].sum())
    seg = envelope(profit, weight)
    order = seg.by_slope()
    filled = np.cumsum(seg.dw[order])
    taken = int(np.searchsorted(filled, room + tol, side="right"))
    np.maximum.at(pos, seg.job[order[:taken]], seg.dst[order[:taken]])
    later = seg.pick(order[taken:])
    if taken == len(order):
        value = float(profit[rows, pos].sum())
        return Relaxation(lam=0.0, bound=value, pos=pos, integral=True, later=later)
    lam = float(seg.slope[order[taken]])
    bound = lagrangian_bound(profit, weight, lam=lam, capacity=capacity)
    return Relaxation(lam=lam, bound=bound, pos=pos, integral=False, later=later)


def continue_greedy(
    later: Segments, weight: Floats, pos: Ints, *, capacity: float, tol: float
) -> Ints:
    """Go on down the slope order past the LP's break, taking every segment that still fits and
    starts where its job stands: the classic MCKP greedy, which fills most of the LP's leftover
    (and all of it when many jobs share the break slope, as identical curves do)."""
    pos = pos.copy()
    room = capacity - float(weight[np.arange(len(pos)), pos].sum())
    fits = np.flatnonzero(later.dw <= room + tol)
    smallest = float(later.dw[fits].min()) if fits.size else 0.0
    jobs, srcs, dsts = later.job[fits].tolist(), later.src[fits].tolist(), later.dst[fits].tolist()
    for j, src, dst, dw in zip(jobs, srcs, dsts, later.dw[fits].tolist(), strict=True):
        if room + tol < smallest:
            break
        if pos[j] == src and dw <= room + tol:
            pos[j] = dst
            room -= dw
    return pos


def fill(profit: Floats, weight: Floats, pos: Ints, *, capacity: float, tol: float) -> Ints:
    """Improve a feasible solution: repeatedly make the single most profitable move that fits."""
    pos = pos.copy()
    rows = np.arange(len(profit))
    for _ in range(16):  # a few moves take up the LP's leftover; the exact core does the rest
        room = capacity - float(weight[rows, pos].sum())
        fits = weight <= (weight[rows, pos] + room + tol)[:, None]
        gain = np.where(fits, profit - profit[rows, pos][:, None], -np.inf)
        best = np.argmax(gain, axis=1)
        job = int(np.argmax(gain[rows, best]))
        if not gain[job, best[job]] > 0:
            break
        pos[job] = best[job]
    return pos


def effective_capacity(profit: Floats, weight: Floats, *, capacity: float, tol: float) -> float:
    """The capacity rounded down to what sums of the items' weights can reach at all.

    When every weight is a multiple of some d (GPUs in multiples of a node, sizes in halves),
    so is every total. Rounding C down to a multiple of d tightens the LP bound for free.
    """
    used = weight[np.isfinite(profit)]
    for scale in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        scaled = used * scale
        ints = np.round(scaled)
        if np.all(np.abs(scaled - ints) <= 1e-9 * np.maximum(1.0, scaled)) and ints.max() < 2**53:
            step = int(np.gcd.reduce(ints.astype(np.int64)))
            if step == 0:
                return capacity
            return math.floor((capacity + tol) * scale / step) * step / scale
    return capacity
