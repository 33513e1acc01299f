"""Squared gradient norms around data-parallel averaging: what the gradient-noise estimator needs.

Each replica's gradient is one *piece* of the step's global batch. Before the all-reduce a replica
takes its piece's squared norm; after it, the squared norm of the average. A tiny all-reduce of
the local norms gives their mean over the c pieces. These two numbers (mean local squared norm,
squared norm of the average) are unbiased inputs for the gradient square and variance with c > 1
(AdaptDL, petuum/adaptdl `adaptdl/torch/gradient_noise_scale.py`, does the same).

With accumulation a replica's piece is its accumulated gradient (local batch x accumulation
steps): the micro-batches' own norms would need a copy of the gradient per micro-step. A single
replica has no other replica to compare with, so its pieces are its micro-batches
(`MicroBatchNorms`: the accumulated gradient read between micro-steps, one copy kept; both
training paths run a step without accumulation as two halves for it). Only a step that cannot be
halved (an odd local batch) pairs this step's gradient with the previous step's (a copy kept
between steps), a differenced estimate, biased by the step taken between them.

Cost per step: one squared norm per bucket before and after the all-reduce (float64
accumulation) and one one-element all-reduce.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autoscaler.training.adaptation import NormSample


def squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(tensor, dtype=torch.float64).square()


class GradientNorms:
    """The squared norms of the gradient buckets a comm hook sees, one step at a time.

    `start(replicas)` begins a step; the hook calls `before(index, buffer)` with a bucket's local
    gradient and `after(buffer)` with the averaged one; `take(batch)` ends the step. `mean_of`
    averages a one-element tensor over the replicas (an all-reduce).
    """

    def __init__(self, mean_of: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self._mean_of = mean_of
        self.replicas = 0
        self._previous: dict[int, torch.Tensor] = {}  # one replica: last step's buckets
        self._previous_local: float | None = None
        self._reset()

    def _reset(self) -> None:
        self._local = torch.zeros((), dtype=torch.float64)
        self._total = torch.zeros((), dtype=torch.float64)
        self._pair = torch.zeros((), dtype=torch.float64)  # one replica: |mean of the two|^2
        self._paired = True

    def start(self, replicas: int) -> None:
        if replicas != self.replicas:  # the world changed: last step's gradient is no piece
            self.replicas = replicas
            self._previous.clear()
            self._previous_local = None
        self._reset()

    def before(self, index: int, buffer: torch.Tensor) -> None:
        self._local += squared_norm(buffer)
        if self.replicas != 1:
            return
        previous = self._previous.get(index)
        if previous is None or previous.shape != buffer.shape:
            self._paired = False
            self._previous[index] = buffer.detach().clone()
        else:
            self._pair += squared_norm(previous.add_(buffer).mul_(0.5))
            previous.copy_(buffer)

    def after(self, buffer: torch.Tensor) -> None:
        self._total += squared_norm(buffer)

    def take(self) -> NormSample | None:
        """This step's sample, or None for a single replica's first step (no previous gradient
        to pair with)."""
        if self.replicas > 1:
            return NormSample(float(self._mean_of(self._local)), float(self._total), self.replicas)
        local, previous_local = float(self._local), self._previous_local
        self._previous_local = local
        if previous_local is None or not self._paired:
            return None
        return NormSample(local, float(self._pair), 1, previous_sqr=previous_local)


class MicroBatchNorms:
    """One replica's step in pieces: each micro-batch's gradient, as the difference of the
    accumulated gradient read after consecutive micro-steps (DDP accumulates them unscaled in
    `.grad` until the last one's backward averages them over the micro-steps).

    `start()` begins a step, `accumulated()` follows each micro-step but the last, and
    `take(micro_steps)` follows the last one's backward.
    """

    def __init__(self, parameters: list[torch.nn.Parameter]) -> None:
        self.parameters = parameters
        self.start()

    def start(self) -> None:
        self._sum: torch.Tensor | None = None  # the micro-steps' gradients so far
        self._pieces_sqr = 0.0

    def _gradient(self) -> torch.Tensor:
        return torch.cat(
            [p.grad.detach().reshape(-1) for p in self.parameters if p.grad is not None]
        )

    def accumulated(self) -> None:
        total = self._gradient()
        piece = total if self._sum is None else total - self._sum
        self._pieces_sqr += float(squared_norm(piece))
        self._sum = total.clone()

    def take(self, micro_steps: int) -> NormSample:
        average = self._gradient()
        last = average * micro_steps if self._sum is None else average * micro_steps - self._sum
        local = (self._pieces_sqr + float(squared_norm(last))) / micro_steps
        sample = NormSample(local, float(squared_norm(average)), micro_steps)
        self.start()
        return sample
