"""A goodput job's batch, learning rate and progress, chosen from its own measurements (pure).

A job declares its base global batch B0, the largest local batch that fits and the largest
global batch (`GoodputSpec`). Each step feeds the gradient-noise estimator (`measure`) and the
step's duration at its configuration (`record_step`). For the replica count it has, `choose`
picks the local batch and accumulation steps that maximise goodput under the step-time model
fitted over the job's own observations (the same fit the engine makes over the same
observations, which the job exports). The learning rate follows the declared rule, and progress
counts samples at B0: a step at global batch B adds B x E(B).

The state (estimator, observations, progress) is a plain dict for the job's checkpoint, so a
restarted job keeps what it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autoscaler.goodput.batch import BatchLimits, best_batch
from autoscaler.goodput.efficiency import GradientNoise, GradientStatsEstimator, efficiency
from autoscaler.goodput.learning_rate import LrRule, lr_factor
from autoscaler.goodput.step_time import StepObservation, StepTimeModel, fit, throughput
from autoscaler.training import GoodputReport

SWITCH_GAIN = 1.05  # re-choose only for 5 % more goodput (AdaptDL's hysteresis)
# Steps between re-choices at an unchanged world: often enough that the batch follows the noise
# and step times to within the hysteresis (the e2e goodput scenario checks it against the price).
RECHOOSE_EVERY = 20


@dataclass(frozen=True)
class GoodputSpec:
    """What a goodput job declares."""

    base_batch: int
    max_local_batch: int
    max_global_batch: int
    lr_rule: LrRule = "adascale"

    @property
    def limits(self) -> BatchLimits:
        return BatchLimits(self.base_batch, self.max_local_batch, self.max_global_batch)

    def __post_init__(self) -> None:
        self.limits  # noqa: B018  # the core checks the bounds


@dataclass(frozen=True)
class Config:
    """The batch in use: `local_batch` samples per micro-step, `accum_steps` micro-steps beyond
    the first (Pollux's convention: 0 = no accumulation)."""

    replicas: int
    local_batch: int
    accum_steps: int

    @property
    def micro_steps(self) -> int:
        return self.accum_steps + 1

    @property
    def global_batch(self) -> int:
        return self.replicas * self.local_batch * self.micro_steps

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.replicas, self.local_batch, self.accum_steps)


@dataclass(frozen=True)
class NormSample:
    """One step's squared gradient norms. `pieces` >= 2: `local_sqr` is the mean over the pieces
    of a piece's squared norm, `total_sqr` the squared norm of their average. `pieces` == 1 (one
    replica): `local_sqr` is this step's gradient's, `previous_sqr` the previous step's and
    `total_sqr` the squared norm of the two's average."""

    local_sqr: float
    total_sqr: float
    pieces: int
    previous_sqr: float = 0.0


def in_halves(config: Config) -> Config:
    """How a step at `config` runs when its noise is measured: a single replica has no other
    replica's gradient to compare with, so a step without accumulation runs as two half
    micro-batches (the same samples and global batch; its configuration is still `config`)."""
    if config.replicas == 1 and config.accum_steps == 0 and config.local_batch % 2 == 0:
        return Config(1, config.local_batch // 2, 1)
    return config


def nodes_of(replicas: int) -> int:
    """One worker per pod, placement unknown: every replica counts as its own node (the engine
    prices a count the same way)."""
    return replicas


class Adaptation:
    """The job's measurements and the choices made from them."""

    def __init__(self, spec: GoodputSpec, state: dict[str, Any] | None = None) -> None:
        self.spec = spec
        state = state or {}
        noise_state = state.get("noise")
        self.estimator = (
            GradientStatsEstimator.from_state(noise_state)
            if noise_state is not None
            else GradientStatsEstimator()
        )
        # (replicas, local batch, accumulation steps) -> [seconds summed, steps]
        self._times: dict[tuple[int, int, int], list[float]] = {
            (int(r), int(m), int(s)): [float(seconds), float(count)]
            for (r, m, s), seconds, count in state.get("step_times", [])
        }
        self.progress = float(state.get("progress", 0.0))  # samples at B0
        self.samples = int(state.get("samples", 0))  # plain samples trained
        self._model: StepTimeModel | None = None  # the fit, until a new observation

    def state_dict(self) -> dict[str, Any]:
        return {
            "noise": self.estimator.state(),
            "step_times": [[list(key), total[0], total[1]] for key, total in self._times.items()],
            "progress": self.progress,
            "samples": self.samples,
        }

    @property
    def noise(self) -> GradientNoise | None:
        """The smoothed gradient noise at B0, None before the first measurement."""
        return self.estimator.noise(self.spec.base_batch) if self.estimator.ready else None

    def _noise_or_none_yet(self) -> GradientNoise:
        """Before a finite measurement the noise counts as none: a large batch then gains
        nothing (an early estimate of the true gradient's norm at or below 0 reads as infinite
        noise, which would pick the largest batch)."""
        noise = self.noise
        if noise is None or not math.isfinite(noise.phi):
            return GradientNoise(0.0, self.spec.base_batch)
        return noise

    def measure(self, sample: NormSample, *, batch: int) -> None:
        """One step's gradient norms at global batch `batch`."""
        scale = batch / self.spec.base_batch
        if sample.pieces == 1:
            self.estimator.update_differenced(
                sample.previous_sqr, sample.local_sqr, sample.total_sqr, scale
            )
        else:
            self.estimator.update(sample.local_sqr, sample.total_sqr, sample.pieces, scale)

    def record_step(self, config: Config, seconds: float) -> None:
        totals = self._times.setdefault(config.key, [0.0, 0.0])
        totals[0] += seconds
        totals[1] += 1
        self._model = None

    def step_seconds(self) -> dict[tuple[int, int, int], float]:
        """The mean step time at each configuration the job has run."""
        return {key: seconds / count for key, (seconds, count) in self._times.items()}

    def model(self) -> StepTimeModel:
        """The step-time model fitted over the job's own observations (the prior without)."""
        if self._model is None:
            observations = [
                StepObservation(nodes_of(r), r, m, s, seconds)
                for (r, m, s), seconds in self.step_seconds().items()
            ]
            self._model = fit(observations)
        return self._model

    def choose(self, replicas: int, current: Config | None = None) -> Config:
        """The configuration to run with `replicas` workers: the goodput-maximising one, unless
        `current` (at the same count) comes within the switching margin of it."""
        best = best_batch(
            self.model(),
            self._noise_or_none_yet(),
            self.spec.limits,
            replicas=replicas,
            nodes=nodes_of(replicas),
        )
        chosen = Config(replicas, best.local_batch, best.accum_steps)
        if current is None or current.replicas != replicas or current == chosen:
            return chosen
        return chosen if best.goodput > SWITCH_GAIN * self.goodput(current) else current

    def goodput(self, config: Config) -> float:
        """Samples at B0 per second at `config`, under the fitted model and the current noise."""
        rate = throughput(
            self.model(),
            nodes=nodes_of(config.replicas),
            replicas=config.replicas,
            local_batch=config.local_batch,
            accum_steps=config.accum_steps,
        )
        return rate * efficiency(self._noise_or_none_yet(), config.global_batch)

    def lr_factor(self, global_batch: int) -> float:
        """The learning rate's multiplier over the base batch's, by the declared rule."""
        return lr_factor(self.spec.lr_rule, self._noise_or_none_yet(), global_batch)

    def report(self, config: Config) -> GoodputReport:
        """What the job exports (the metrics contract's goodput gauges) while at `config`."""
        noise = self.noise
        return GoodputReport(
            noise_scale=None if noise is None or not math.isfinite(noise.phi) else noise.phi,
            base_batch=self.spec.base_batch,
            local_batch=config.local_batch,
            accum_steps=config.accum_steps,
            replicas=config.replicas,
            max_local_batch=self.spec.max_local_batch,
            max_global_batch=self.spec.max_global_batch,
            step_seconds=self.step_seconds(),
        )

    def advance(self, global_batch: int) -> float:
        """Count one step at `global_batch`; returns the progress it made, in samples at B0."""
        made = global_batch * efficiency(self._noise_or_none_yet(), global_batch)
        self.progress += made
        self.samples += global_batch
        return made
