"""Pollux's model of one optimizer step's time, fitted from a job's own observations.

With local batch m, r replicas on n nodes and s accumulated micro-steps:
T_acc = alpha_c + beta_c m (one micro-step's compute); T_net = 0 for r = 1, else
alpha_r + beta_r max(r - 2, 0) within one node and alpha_n + beta_n max(r - 2, 0) across nodes;
the synchronising micro-step overlaps compute and communication,
T_sync = (T_acc^gamma + T_net^gamma)^(1/gamma) with gamma in [1, 10]; a step takes
s T_acc + T_sync and processes r m (s + 1) samples.

Past the widest replica count a job has run at, T_net is taken as it was there: the fit saw the
network's growth only within that range, so it is not extrapolated, and the optimistic price is
corrected by the job's first step at the wider count (AdaptDL leaves a parameter no observation
informs at its optimistic bound; this carries that rule from parameters to counts).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
from scipy.optimize import least_squares

FLOOR = 1e-8  # a parameter no observation informs, where the prior has it at "free"
MAX_GAMMA = 10.0
NETWORK_PRIOR_RATIO = 1.1
# Where the fit of an informed parameter starts (AdaptDL's initial values).
START = {
    "alpha_n": 0.1,
    "beta_n": 0.01,
    "alpha_r": 0.1,
    "beta_r": 0.01,
    "gamma": 1.001,
}  # with no multi-node data, crossing nodes costs >= 1.1x within one


@dataclass(frozen=True)
class StepTimeModel:
    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float
    widest: int | None = None  # the most replicas observed: T_net is flat past it (None: not)

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name != "widest" and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{item.name} must be finite and > 0, got {value}")
        if not 1 <= self.gamma <= MAX_GAMMA:
            raise ValueError(f"gamma must be in [1, {MAX_GAMMA:g}], got {self.gamma}")
        if self.widest is not None and self.widest < 1:
            raise ValueError(f"widest must be >= 1, got {self.widest}")


# Before a job has run: compute of 0.1 s + 0.01 s per sample, communication negligible (a job's
# speedup is taken as its replica count until it has run at more than one), as AdaptDL starts.
PRIOR = StepTimeModel(
    alpha_c=0.1, beta_c=0.01, alpha_n=FLOOR, beta_n=FLOOR, alpha_r=FLOOR, beta_r=FLOOR, gamma=1.0
)


@dataclass(frozen=True)
class StepObservation:
    """A job's mean step time at one configuration."""

    nodes: int
    replicas: int
    local_batch: int
    accum_steps: int
    step_seconds: float


def network_seconds(model: StepTimeModel, *, nodes: int, replicas: int) -> float:
    """The synchronisation's own time: none for one replica, else within a node or across;
    past the model's widest count, as at that count."""
    if replicas <= 1:
        return 0.0
    extra = max(min(replicas, model.widest or replicas) - 2, 0)
    if nodes > 1:
        return model.alpha_n + model.beta_n * extra
    return model.alpha_r + model.beta_r * extra


def step_seconds(
    model: StepTimeModel, *, nodes: int, replicas: int, local_batch: float, accum_steps: int
) -> float:
    """Seconds of one optimizer step (accumulation included)."""
    compute = model.alpha_c + model.beta_c * local_batch
    network = network_seconds(model, nodes=nodes, replicas=replicas)
    synchronising: float = (compute**model.gamma + network**model.gamma) ** (1 / model.gamma)
    return accum_steps * compute + synchronising


def throughput(
    model: StepTimeModel, *, nodes: int, replicas: int, local_batch: float, accum_steps: int
) -> float:
    """Samples per second."""
    seconds = step_seconds(
        model, nodes=nodes, replicas=replicas, local_batch=local_batch, accum_steps=accum_steps
    )
    return replicas * local_batch * (accum_steps + 1) / seconds


def _informed(observations: Sequence[StepObservation]) -> dict[str, bool]:
    """Which parameters the observations can inform (AdaptDL's rules)."""
    multi_node = [o for o in observations if o.nodes > 1]
    one_node = [o for o in observations if o.nodes == 1 and o.replicas > 1]
    return {
        "alpha_c": len({o.local_batch for o in observations}) > 1,
        "beta_c": True,
        "alpha_n": bool(multi_node),
        "beta_n": any(o.replicas > 2 for o in multi_node),
        "alpha_r": bool(one_node),
        "beta_r": any(o.replicas > 2 for o in one_node),
        "gamma": bool(multi_node or one_node),
    }


def _residuals(
    values: np.ndarray, names: list[str], base: StepTimeModel, data: Sequence[StepObservation]
) -> np.ndarray:
    """Log errors (their mean square is the RMSLE's square) and the small regularisers."""
    model = replace(base, **dict(zip(names, np.exp(values).tolist(), strict=True)))
    predicted = [
        step_seconds(
            model, nodes=o.nodes, replicas=o.replicas, local_batch=o.local_batch,
            accum_steps=o.accum_steps,
        )
        for o in data
    ]  # fmt: skip
    errors = (np.log(predicted) - np.log([o.step_seconds for o in data])) / math.sqrt(len(data))
    # As AdaptDL: gamma near 1 (easier to fit), retrogression terms small (an optimistic model).
    regularisers = [
        math.sqrt(1e-3) * (model.gamma - 1),
        0.1 * model.beta_n / model.alpha_n,
        0.1 * model.beta_r / model.alpha_r,
    ]
    return np.concatenate([errors, regularisers])


def fit(observations: Sequence[StepObservation], prior: StepTimeModel = PRIOR) -> StepTimeModel:
    """The model minimising the squared log error of the observed step times (plus small
    regularisers), parameters searched in log space.

    Parameters no observation informs stay at the prior; with a single local batch observed,
    alpha_c is held at half of the per-micro-step time (compute split evenly between its constant
    and per-sample parts, AdaptDL's optimistic choice); with no multi-node observation the
    inter-node terms are at least 1.1x the intra-node ones. The model's `widest` is the most
    replicas observed.
    """
    data = [o for o in observations if o.step_seconds > 0 and o.replicas >= 1]
    if not data:
        return prior
    base = prior
    informed = _informed(data)
    if not informed["alpha_c"]:
        per_micro = float(np.mean([o.step_seconds / (o.accum_steps + 1) for o in data]))
        base = replace(base, alpha_c=max(per_micro / 2, FLOOR))
    names = [name for name, free in informed.items() if free]
    start = np.log([START.get(name, getattr(base, name)) for name in names])
    low = [0.0 if name == "gamma" else math.log(FLOOR) for name in names]
    high = [math.log(MAX_GAMMA) if name == "gamma" else math.log(1e4) for name in names]
    result = least_squares(
        _residuals, np.clip(start, low, high), bounds=(low, high), args=(names, base, data)
    )
    values = np.exp(result.x).tolist()
    model = replace(base, **dict(zip(names, values, strict=True)))
    if not informed["alpha_n"]:
        model = replace(
            model,
            alpha_n=max(model.alpha_n, NETWORK_PRIOR_RATIO * model.alpha_r),
            beta_n=max(model.beta_n, NETWORK_PRIOR_RATIO * model.beta_r),
        )
    widest = max(o.replicas for o in data)
    return replace(model, gamma=min(max(model.gamma, 1.0), MAX_GAMMA), widest=widest)
