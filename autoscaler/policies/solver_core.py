"""The exact part of `solver`: reduced-cost fixing, then a bounded dynamic programme on the core.

Reduced-cost fixing: with the LP multiplier lam, any solution that uses item (j, k) is worth at
most L(lam) - (max_k' r_jk' - r_jk), where r = p - lam * w. Items whose bound cannot beat the
incumbent are dropped; jobs left with one item are fixed; the rest form the (small) core.

The core is solved by a DP over Pareto-optimal (weight, profit) states, one job at a time, in the
spirit of Pisinger's minimal MCKP algorithm (1995). A state is kept only while its profit plus the
LP bound of the jobs still to come, with the capacity it leaves them, can beat the incumbent; the
integral part of that LP is a feasible completion, which raises the incumbent as the DP goes. The
states need no integer weights, so float sizes (0.5, 1.5 GPUs) are exact too.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from autoscaler.policies.solver_lp import Floats, Ints, envelope, lightest


def threshold(value: float, max_gap: float) -> float:
    """The largest bound still within `max_gap` (relative to the bound) of `value`."""
    if max_gap <= 0:
        return value
    return value / (1 - max_gap) if value >= 0 else value / (1 + max_gap)


def fix(profit: Floats, weight: Floats, *, lam: float, capacity: float, floor: float) -> Floats:
    """`profit` with -inf for every item whose Lagrangian bound does not exceed `floor`."""
    reduced = profit - lam * weight
    best = reduced.max(axis=1)
    bound = lam * capacity + best.sum() - (best[:, None] - reduced)
    return np.where(bound > floor, profit, -np.inf)


@dataclass
class _Rest:
    """The LP of jobs t+1.. of the core, as a function of the capacity they are left."""

    profit: Floats
    weight: Floats
    tol: float
    first: Ints = field(init=False)
    base_w: Floats = field(init=False)  # base_w[t]: lightest items of jobs t.. together
    base_p: Floats = field(init=False)

    def __post_init__(self) -> None:
        self.first = lightest(self.profit)
        rows = np.arange(len(self.profit))
        zero = np.zeros(1)
        self.base_w = np.concatenate([np.cumsum(self.weight[rows, self.first][::-1])[::-1], zero])
        self.base_p = np.concatenate([np.cumsum(self.profit[rows, self.first][::-1])[::-1], zero])
        seg = envelope(self.profit, self.weight)
        order = seg.by_slope()
        self.job, self.dst = seg.job[order], seg.dst[order]
        self.dw, self.dp = seg.dw[order], seg.dp[order]

    def bounds(self, t: int, room: Floats) -> tuple[Floats, Floats, Ints]:
        """Upper bound, feasible completion value and segments taken, for jobs after t."""
        later = self.job > t
        dw, dp = self.dw[later], self.dp[later]
        cum_w = np.concatenate([[0.0], np.cumsum(dw)])
        cum_p = np.concatenate([[0.0], np.cumsum(dp)])
        free = room - self.base_w[t + 1]
        whole = np.searchsorted(cum_w, free + self.tol, side="right") - 1
        lower = self.base_p[t + 1] + cum_p[whole]
        upper = lower
        if dw.size:  # plus the fraction of the segment where the capacity runs out
            part = np.minimum(whole, len(dw) - 1)
            share = np.clip((free - cum_w[whole]) / dw[part], 0.0, 1.0)
            upper = lower + np.where(whole < len(dw), share * dp[part], 0.0)
        feasible = free >= -self.tol
        return np.where(feasible, upper, -np.inf), np.where(feasible, lower, -np.inf), whole

    def completion(self, t: int, taken: int) -> Ints:
        """Positions of jobs after t in the feasible completion that takes `taken` segments."""
        pos = self.first.copy()
        later = self.job > t
        np.maximum.at(pos, self.job[later][:taken], self.dst[later][:taken])
        return pos


@dataclass
class CoreResult:
    value: float  # the best total (base + core) found; the incumbent's if nothing beat it
    pos: Ints | None  # the core's positions when something beat the incumbent, else None
    bound: float  # what the search proved: nothing it dropped or left can exceed this


@dataclass
class _Search:
    profit: Floats
    weight: Floats
    capacity: float
    base: float
    floor_of: Callable[[float], float]
    tol: float
    best: float
    max_states: int
    best_pos: Ints | None = None
    parents: list[Ints] = field(default_factory=list)
    choices: list[Ints] = field(default_factory=list)

    def run(self) -> CoreResult:
        # Every job fixed: their items together are the one candidate.
        if not len(self.profit) and self.capacity >= -self.tol and self.base > self.best:
            self.best, self.best_pos = self.base, np.zeros(0, dtype=np.int64)
        rest = _Rest(self.profit, self.weight, self.tol)
        sw, sp = np.zeros(1), np.zeros(1)
        for t in range(len(self.profit)):
            cols = np.flatnonzero(np.isfinite(self.profit[t]))
            w = (sw[:, None] + self.weight[t, cols]).ravel()
            p = (sp[:, None] + self.profit[t, cols]).ravel()
            par = np.repeat(np.arange(len(sw)), len(cols))
            ch = np.tile(cols, len(sw))
            upper, lower, whole = rest.bounds(t, self.capacity - w)
            self._improve(t, rest, value=p + lower, par=par, ch=ch, whole=whole)
            keep = self.base + p + upper > self.floor_of(self.best)
            if keep.sum() > self.max_states:
                return self._give_up(float(np.max(self.base + p[keep] + upper[keep])))
            sw, sp = self._pareto(w[keep], p[keep], par[keep], ch[keep])
            if not len(sw):
                break
        return CoreResult(self.best, self.best_pos, self.floor_of(self.best))

    def _improve(
        self, t: int, rest: _Rest, *, value: Floats, par: Ints, ch: Ints, whole: Ints
    ) -> None:
        """Adopt the best feasible completion of this stage's states if it beats the best."""
        i = int(np.argmax(value))
        if not self.base + value[i] > self.best:
            return
        self.best = self.base + float(value[i])
        pos = rest.completion(t, int(whole[i]))
        pos[t], state = ch[i], par[i]
        for u in range(t - 1, -1, -1):
            pos[u], state = self.choices[u][state], self.parents[u][state]
        self.best_pos = pos

    def _pareto(self, w: Floats, p: Floats, par: Ints, ch: Ints) -> tuple[Floats, Floats]:
        """Keep the states no lighter-or-equal state beats; remember how each was reached."""
        order = np.lexsort((ch, par, -p, w))
        w, p = w[order], p[order]
        before = np.concatenate([[-np.inf], np.maximum.accumulate(p)[:-1]])
        front = p > before
        self.parents.append(par[order][front])
        self.choices.append(ch[order][front])
        return w[front], p[front]

    def _give_up(self, open_bound: float) -> CoreResult:
        return CoreResult(self.best, self.best_pos, max(self.floor_of(self.best), open_bound))


def search_core(
    profit: Floats,
    weight: Floats,
    *,
    capacity: float,
    base: float,
    incumbent: float,
    floor_of: Callable[[float], float],
    tol: float,
    max_states: int,
) -> CoreResult:
    """Best core solution worth more than `incumbent` (total with `base`), if there is one.

    `floor_of(v)`: states whose bound does not exceed it are dropped once v is the incumbent.
    Stops early, reporting the best open bound, if a stage would hold over `max_states` states.
    """
    search = _Search(profit, weight, capacity, base, floor_of, tol, incumbent, max_states)
    return search.run()
