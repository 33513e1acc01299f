"""The batch that maximises goodput at a worker count (AdaptDL's `goodput.py` `optimize`).

Candidates: 50 global batches spaced geometrically from max(B0, replicas x smallest local batch)
to the largest global batch. Each is split into a local batch that fits and accumulation steps
(a single replica past B0 accumulates at least once, as AdaptDL does, so its gradient noise stays
measurable); the one with the most goodput = throughput x efficiency wins.
"""

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autoscaler.goodput.efficiency import GradientNoise, efficiencies
from autoscaler.goodput.step_time import StepTimeModel, network_seconds

CANDIDATES = 50
EPS = 1e-8  # against ceil() of a float a rounding error above an integer


@dataclass(frozen=True)
class BatchLimits:
    base_batch: int  # B0
    max_local_batch: int  # the largest that fits on one replica
    max_global_batch: int
    min_local_batch: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.min_local_batch <= self.max_local_batch:
            raise ValueError(
                f"need 1 <= min_local_batch ({self.min_local_batch}) <= max_local_batch"
                f" ({self.max_local_batch})"
            )
        if not 1 <= self.base_batch <= self.max_global_batch:
            raise ValueError(
                f"need 1 <= base_batch ({self.base_batch}) <= max_global_batch"
                f" ({self.max_global_batch})"
            )


@dataclass(frozen=True)
class BatchChoice:
    """A configuration and what it yields; goodput in samples-at-B0 per second. A count at which
    no batch fits has goodput and throughput 0."""

    local_batch: int
    accum_steps: int
    global_batch: int
    efficiency: float
    throughput: float  # samples per second
    goodput: float

    @property
    def fits(self) -> bool:
        return self.goodput > 0


def _split(local: float, limits: BatchLimits, replicas: int) -> tuple[int, int]:
    """(local batch, accumulation steps) for a per-replica share of the global batch."""
    accum = max(math.ceil(local / limits.max_local_batch - EPS) - 1, 0)
    if replicas == 1 and local > limits.base_batch + EPS:
        accum = max(accum, 1)
    return math.ceil(local / (accum + 1) - EPS), accum


def best_batch(
    model: StepTimeModel, noise: GradientNoise, limits: BatchLimits, *, replicas: int, nodes: int
) -> BatchChoice:
    """The goodput-maximising batch for `replicas` on `nodes` (ties: the smaller batch)."""
    if replicas < 1 or not 1 <= nodes <= replicas:
        raise ValueError(f"need 1 <= nodes ({nodes}) <= replicas ({replicas})")
    found = _candidates(limits, replicas)
    if found is None:
        local = limits.min_local_batch
        return BatchChoice(local, 0, replicas * local, 0.0, 0.0, 0.0)
    local_batch, accum_steps = found
    # `step_time.throughput` and `efficiency.efficiency` over every candidate at once: the
    # engine prices each count of every goodput job every round (`make bench-sim`'s goodput runs).
    compute = model.alpha_c + model.beta_c * local_batch
    network = network_seconds(model, nodes=nodes, replicas=replicas)
    synchronising = (compute**model.gamma + network**model.gamma) ** (1 / model.gamma)
    global_batch = replicas * local_batch * (accum_steps + 1)
    speed = global_batch / (accum_steps * compute + synchronising)
    statistical = efficiencies(noise, global_batch)
    goodput = speed * statistical
    best = int(np.argmax(goodput))  # the first of equals: the smaller batch
    return BatchChoice(
        int(local_batch[best]),
        int(accum_steps[best]),
        int(global_batch[best]),
        float(statistical[best]),
        float(speed[best]),
        float(goodput[best]),
    )


Candidates = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


@functools.lru_cache(maxsize=4096)
def _candidates(limits: BatchLimits, replicas: int) -> Candidates | None:
    """(local batch, accumulation steps) of every candidate whose local batch fits, in order of
    their global batch; None when none does."""
    low = max(limits.base_batch, replicas * limits.min_local_batch)
    if low > limits.max_global_batch:
        return None
    splits = [
        _split(batch / replicas, limits, replicas)
        for batch in np.geomspace(low, limits.max_global_batch, CANDIDATES).tolist()
    ]
    kept = [(local, accum) for local, accum in splits
            if limits.min_local_batch <= local <= limits.max_local_batch]  # fmt: skip
    if not kept:
        return None
    local_batch = np.array([local for local, _ in kept], dtype=np.int64)
    accum_steps = np.array([accum for _, accum in kept], dtype=np.int64)
    local_batch.flags.writeable = accum_steps.flags.writeable = False  # shared by the cache
    return local_batch, accum_steps


def goodput_curve(
    model: StepTimeModel,
    noise: GradientNoise,
    limits: BatchLimits,
    counts: Iterable[int],
    *,
    nodes_of: Callable[[int], int],
) -> dict[int, BatchChoice]:
    """Each count's best batch; `nodes_of(count)` is how many nodes that count spans."""
    return {
        count: best_batch(model, noise, limits, replicas=count, nodes=nodes_of(count))
        for count in counts
    }
