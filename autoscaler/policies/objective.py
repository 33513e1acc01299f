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
With `completion-time`, each job's weight w_j is multiplied by i_j^a, i_j its rank, the number
of jobs declaring their work with at least as many seconds left at their smallest count (itself
included; a job declaring none is not ranked), and a the `rank_exponent`: with a = 1 the weights
heSRPT's optimal shares rest on (Berg, Vesilo, Harchol-Balter, "heSRPT", 2020), so a job is
served by its place in the finishing order, not by its size alone; a smaller a keeps more of the
long jobs' share (the tail); a = 0 is unranked.
`speedup.completion_weights` makes the weights.
`value` reports the objective exactly so; `utility` is the per-job term a maximiser adds up.
"""

from typing import Literal, Self

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

Floats = npt.NDArray[np.float64]
Kind = Literal["completion-time", "throughput", "proportional", "power-mean"]


class Objective(BaseModel):
    """The cluster objective over speedups s, or remaining times E, with job weights w."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = Field(
        default="completion-time",
        description="Σ w·E^p over expected remaining times E (the default), or over speedups s:"
        " Σ w·s, Σ w·log s, or the power mean of exponent p",
    )
    exponent: float = Field(
        default=-0.25,
        description="p of `completion-time` and `power-mean`; the default is measured for"
        " completion-time (Pollux's power mean uses -1)",
    )
    rank_exponent: float = Field(
        default=0.5,
        ge=0,
        description="a of `completion-time`: each job's weight times its rank to the power a, the"
        " rank being the number of jobs declaring their work with at least as many seconds left"
        " at their smallest count (1: heSRPT's weights; 0: unranked; a job declaring no work is"
        " not ranked); the default is measured",
    )

    @model_validator(mode="after")
    def _ranked_by_remaining_time(self) -> Self:
        explicit = "rank_exponent" in self.model_fields_set
        if explicit and self.rank_exponent > 0 and not self.over_remaining_time:
            raise ValueError("rank_exponent applies to completion-time: ranks by remaining time")
        return self

    @property
    def ranks(self) -> bool:
        """Weights carry ranks: only over remaining times, where ranks are defined."""
        return self.rank_exponent > 0 and self.over_remaining_time

    @property
    def over_remaining_time(self) -> bool:
        """The per-job quantity is the expected remaining time E, not the speedup s."""
        return self.kind == "completion-time"

    @property
    def minimised(self) -> bool:
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
