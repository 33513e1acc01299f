"""How the learning rate follows a batch change: the factor on the B0 learning rate at batch B."""

import math
from typing import Literal, get_args

from autoscaler.goodput.efficiency import GradientNoise, gain

LrRule = Literal["adascale", "sqrt", "linear"]
LR_RULES: tuple[LrRule, ...] = get_args(LrRule)


def lr_factor(rule: LrRule, noise: GradientNoise, batch: float) -> float:
    """AdaScale: the gain of a step at B; square root: sqrt(S); linear: S (S = B / B0)."""
    scale = batch / noise.base_batch
    if rule == "adascale":
        return gain(noise, batch)
    if rule == "sqrt":
        return math.sqrt(scale)
    if rule == "linear":
        return scale
    raise ValueError(f"unknown learning-rate rule {rule!r}, expected one of {', '.join(LR_RULES)}")
