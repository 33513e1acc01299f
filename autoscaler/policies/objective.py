"""The cluster objective, over per-job speedups or per-job expected remaining times.

With speedup `s_j = T_j(n_j) / T_j(min_j)`, weight `w_j` and exponent `p`:
- `throughput`:   maximise  Σ w_j · s_j
- `proportional`: maximise  Σ w_j · log s_j
- `power-mean`:   p > 0 maximise Σ w_j · s_j^p; p = 0 is `proportional`;
                  p < 0 minimise Σ w_j · s_j^p  (Pollux uses p = -1).
With `E_j`, the job's expected remaining seconds at its count (its remaining work over its
throughput there, plus the stall of a rescale when the count changes):
- `completion-time`: p < 0 maximise Σ w_j · E_j^p  (p = -1: the rate at which jobs complete);
                     p = 0 minimise Σ w_j · log E_j (proportional fairness on speedups again);
                     p > 0 minimise Σ w_j · E_j^p  (p = 1: Optimus' sum of remaining times).
  The more negative p, the more the shortest remaining jobs are served first (SRPT's rule as
  p goes to -inf with linear speedups); p = 0 ignores the work left altogether.
- `ranked-completion`: maximise Σ w_j · i_j · x_j / E_j, where x_j is the job's remaining seconds
  at its smallest count and i_j its rank, the number of jobs with at least as much x left (itself
  included): without a rescale the term is w_j · i_j · s_j, the weights heSRPT's optimal shares
  rest on (Berg, Vesilo, Harchol-Balter, "heSRPT", 2020), so a job gains by its rank in finishing
  order, not by its size; `exponent` is not read. `speedup.completion_weights` makes the weights.
`value` reports the objective exactly so; `utility` is the per-job term a maximiser adds up.
"""

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

Floats = npt.NDArray[np.float64]
Kind = Literal["completion-time", "ranked-completion", "throughput", "proportional", "power-mean"]


class Objective(BaseModel):
    """The cluster objective over speedups s, or remaining times E, with job weights w."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = Field(
        default="completion-time",
        description="Σ w·E^p over expected remaining times E (the default); Σ w·i·x/E, each job's"
        " rate of finishing weighted by its rank i in remaining seconds x at its smallest count"
        " (`ranked-completion`); or over speedups s: Σ w·s, Σ w·log s, or the power mean of"
        " exponent p",
    )
    exponent: float = Field(
        default=-0.25,
        description="p of `completion-time` and `power-mean`; the default is measured for"
        " completion-time (Pollux's power mean uses -1)",
    )

    @property
    def over_remaining_time(self) -> bool:
        """The per-job quantity is the expected remaining time E, not the speedup s."""
        return self.kind in ("completion-time", "ranked-completion")

    @property
    def ranked(self) -> bool:
        """Each job's weight carries its rank and remaining work (`completion_weights`)."""
        return self.kind == "ranked-completion"

    @property
    def minimised(self) -> bool:
        if self.ranked:
            return False
        if self.over_remaining_time:
            return self.exponent >= 0
        return self.kind == "power-mean" and self.exponent < 0

    @property
    def logarithmic(self) -> bool:
        powered = self.kind in ("power-mean", "completion-time")
        return self.kind == "proportional" or (powered and self.exponent == 0)

    def term(self, quantity: Floats) -> Floats:
        """Σ w · term(x) is the objective as reported (minimised when `minimised`)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.ranked:
                return np.power(quantity, -1.0)
            if self.logarithmic:
                return np.log(quantity)
            if self.kind in ("power-mean", "completion-time"):
                return np.power(quantity, self.exponent)
            return quantity

    def utility(self, quantity: Floats, *, weight: float | Floats) -> Floats:
        """What a maximiser adds up: ±w·term(x); -inf where the term has no finite value.
        Elementwise: a table of jobs (rows) by counts takes a column of weights."""
        terms = weight * self.term(np.asarray(quantity, dtype=np.float64))
        utility = -terms if self.minimised else terms
        return np.where(np.isfinite(utility), utility, -np.inf)

    def value(self, quantities: Floats, *, weights: Floats) -> float:
        return float(np.sum(weights * self.term(quantities)))
