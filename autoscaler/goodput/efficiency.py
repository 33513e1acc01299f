"""Statistical efficiency of a global batch from the gradient noise scale, and its estimator.

phi = B0 * grad_var / grad_sqr (the gradient noise scale at B0, PGNS). A step at global batch B
(S = B / B0) makes the progress of gain(B) = S (phi + B0) / (phi + B) steps at B0, so its
efficiency E(B) = gain / S = (phi + B0) / (phi + B) is 1 at B0 and falls as B grows past phi.
"""

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SMOOTHING = 0.999  # AdaptDL's per-B0-step smoothing of the gradient statistics


@dataclass(frozen=True)
class GradientNoise:
    """phi: the gradient noise scale at `base_batch` (B0); inf = noise dominates (E = 1)."""

    phi: float
    base_batch: int

    def __post_init__(self) -> None:
        if not self.phi >= 0:
            raise ValueError(f"phi must be >= 0, got {self.phi}")
        if self.base_batch < 1:
            raise ValueError(f"base_batch must be >= 1, got {self.base_batch}")


def noise_scale(grad_sqr: float, grad_var: float, base_batch: int) -> float:
    """phi = B0 * var / sqr: inf when the true gradient's norm is 0 and noise is not, 0 with no
    noise (a negative estimate counts as none)."""
    var = max(grad_var, 0.0)
    if grad_sqr <= 0:
        return math.inf if var > 0 else 0.0
    return base_batch * var / grad_sqr


def efficiency(noise: GradientNoise, batch: float) -> float:
    """(phi + B0) / (phi + B): progress per sample at global batch `batch`, relative to B0."""
    if batch <= 0:
        raise ValueError(f"batch must be > 0, got {batch}")
    return float(efficiencies(noise, np.array([batch], dtype=np.float64))[0])


def efficiencies(noise: GradientNoise, batches: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """`efficiency` at every global batch of `batches` (each > 0); inf phi (noise dominates) or a
    zero denominator: 1."""
    batch = np.asarray(batches, dtype=np.float64)
    if math.isinf(noise.phi):
        return np.ones(len(batch))
    denominator = noise.phi + batch
    safe = np.where(denominator == 0, 1.0, denominator)
    return np.where(denominator == 0, 1.0, (noise.phi + noise.base_batch) / safe)


def gain(noise: GradientNoise, batch: float) -> float:
    """(var + sqr) / (var / S + sqr) = S * E(B): the B0-steps of progress one step at B makes."""
    return batch / noise.base_batch * efficiency(noise, batch)


class GradientStatsEstimator:
    """grad_sqr and grad_var from each step's squared gradient norms, as AdaptDL estimates them.

    Per step the caller gives `local_sqr`, the mean over the c = replicas x micro-batches of each
    micro-batch gradient's squared norm, `total_sqr`, the squared norm of their average, and the
    scale S = global batch / B0 of the step. Unbiased estimates:
    grad_sqr = (c total - local) / (c - 1), grad_var = (local - total) S / (c - 1), each smoothed
    by a bias-corrected exponential average with factor 0.999^S. With c = 1 there is one gradient
    only: `update_differenced` pairs it with the previous step's, a slightly biased estimate that
    is dropped (the averages restart) once true estimates (c > 1) arrive.
    """

    def __init__(self) -> None:
        self._biased: dict[str, float] = {}
        self._weight: dict[str, float] = {}
        self._differenced = False
        self._reset()

    def _reset(self) -> None:
        self._biased = {"sqr": 0.0, "var": 0.0}
        self._weight = {"sqr": 0.0, "var": 0.0}
        self._differenced = False

    def update(self, local_sqr: float, total_sqr: float, count: int, scale: float) -> None:
        """One step with `count` >= 2 gradients averaged."""
        if count < 2:
            raise ValueError(f"count must be >= 2 (use update_differenced for 1), got {count}")
        if self._differenced:
            self._reset()
        self._add(local_sqr, total_sqr, count, scale)

    def update_differenced(
        self, previous_sqr: float, current_sqr: float, average_sqr: float, scale: float
    ) -> None:
        """One step with a single gradient: its squared norm, the previous step's, and the
        squared norm of the two's average (two gradients at the combined scale 2S)."""
        self._differenced = True
        self._add((previous_sqr + current_sqr) / 2, average_sqr, 2, 2 * scale)

    def _add(self, local_sqr: float, total_sqr: float, count: int, scale: float) -> None:
        if scale <= 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        sqr = (count * total_sqr - local_sqr) / (count - 1)
        var = (local_sqr - total_sqr) * scale / (count - 1)
        theta = SMOOTHING**scale
        for name, value in (("sqr", sqr), ("var", var)):
            self._biased[name] = theta * self._biased[name] + (1 - theta) * value
            self._weight[name] = theta * self._weight[name] + (1 - theta)

    @property
    def ready(self) -> bool:
        return self._weight["sqr"] > 0

    @property
    def grad_sqr(self) -> float:
        return self._value("sqr")

    @property
    def grad_var(self) -> float:
        return self._value("var")

    def _value(self, name: str) -> float:
        if not self.ready:
            raise ValueError("no gradient statistics yet")
        return self._biased[name] / self._weight[name]

    def noise(self, base_batch: int) -> GradientNoise:
        return GradientNoise(noise_scale(self.grad_sqr, self.grad_var, base_batch), base_batch)

    def state(self) -> dict[str, float]:
        """Everything needed to resume (kept in a checkpoint)."""
        return {
            "sqr_biased": self._biased["sqr"],
            "var_biased": self._biased["var"],
            "sqr_weight": self._weight["sqr"],
            "var_weight": self._weight["var"],
            "differenced": float(self._differenced),
        }

    @classmethod
    def from_state(cls, state: dict[str, float]) -> "GradientStatsEstimator":
        estimator = cls()
        estimator._biased = {"sqr": state["sqr_biased"], "var": state["var_biased"]}
        estimator._weight = {"sqr": state["sqr_weight"], "var": state["var_weight"]}
        estimator._differenced = bool(state["differenced"])
        return estimator
