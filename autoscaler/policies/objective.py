"""The cluster objective over per-job speedups, as the issue defines it.

With speedup `s_j = T_j(n_j) / T_j(min_j)` and weight `w_j`:
- `throughput`:   maximise  Σ w_j · s_j
- `proportional`: maximise  Σ w_j · log s_j
- `power-mean`:   p > 0 maximise Σ w_j · s_j^p; p = 0 is `proportional`;
                  p < 0 minimise Σ w_j · s_j^p
  (Pollux uses p = -1).
`value` reports the objective exactly so; `utility` is the per-job term a maximiser adds up.
"""

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

Floats = npt.NDArray[np.float64]


class Objective(BaseModel):
    """The cluster objective over speedups s = T(n) / T(min) with job weights w."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["throughput", "proportional", "power-mean"] = Field(
        default="proportional",
        description="Σ w·s, Σ w·log s, or the power mean of exponent p (see the README for why"
        " proportional is the default)",
    )
    exponent: float = Field(default=-1.0, description="p of the power mean (kind power-mean only)")

    @property
    def minimised(self) -> bool:
        return self.kind == "power-mean" and self.exponent < 0

    @property
    def logarithmic(self) -> bool:
        return self.kind == "proportional" or (self.kind == "power-mean" and self.exponent == 0)

    def term(self, speedup: Floats) -> Floats:
        """Σ w · term(s) is the objective as reported (minimised when `minimised`)."""
        with np.errstate(divide="ignore"):
            if self.logarithmic:
                return np.log(speedup)
            if self.kind == "power-mean":
                return np.power(speedup, self.exponent)
            return speedup

    def utility(self, speedup: Floats, *, weight: float) -> Floats:
        """What a maximiser adds up: ±w·term(s); -inf where a speedup of 0 has no finite value."""
        terms = weight * self.term(np.asarray(speedup, dtype=np.float64))
        utility = -terms if self.minimised else terms
        return np.where(np.isfinite(utility), utility, -np.inf)

    def value(self, speedups: Floats, *, weights: Floats) -> float:
        return float(np.sum(weights * self.term(speedups)))
