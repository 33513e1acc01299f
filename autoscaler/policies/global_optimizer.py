"""`global-optimizer`: every job's count at once, exactly optimal for the stated objective.

Each job's throughput curve comes from its throughput model. With the default objective
(`completion-time`) a count is worth what finishing the job's remaining work there is worth: its
expected remaining seconds, plus the stall of a rescale when the count changes (the cost priced
in time, so a job near its end is not restarted for a few seconds' gain, and a long one is).
With an objective over speedups (`speedup-optimizer`, `pollux-style`), a count other than the
current one is worth its speedup times `1 - restart_seconds / horizon_seconds`. Either way
the rescale is paid inside the optimisation, not filtered afterwards, and the multiple-choice
knapsack over the chosen resource is solved exactly (`solver.solve_allocation`).
"""

from collections.abc import Callable, Sequence
from datetime import datetime

import numpy as np
from pydantic import Field, PositiveFloat

from autoscaler.api import coordinates as c
from autoscaler.policies.contract import (
    Decision,
    JobSnapshot,
    PolicyConfig,
    PolicyPlugin,
    Reporting,
    Snapshot,
)
from autoscaler.policies.objective import Floats, Objective
from autoscaler.policies.solver import (
    Allocation,
    InsufficientCapacity,
    greedy_allocation,
    solve_allocation,
)
from autoscaler.policies.speedup import JobCurve, current_count, job_curve, remaining_seconds
from autoscaler.policies.throughput_model import ThroughputModel
from autoscaler.torchrun import RESCALE_STALL_SECONDS

GPU = c.GPU_RESOURCE


# A job is explored up to twice its largest observed count at once (or one more worker), valued
# there as high as a concave curve through its last two points could reach: the fit bends down
# past the data, and without this the bundled default kept 74 % of its GPUs busy, with it 83 %
# (equal-share 86 %), at a mean JCT within 0.2 % (1.2 % with the simulator's noise on; the
# docs/policies.md has the figures of benchmarks/sweep_sim.py).
EXPLORING = ThroughputModel(exploration_factor=2.0, extrapolation="optimistic")


class GlobalOptimizerConfig(PolicyConfig):
    objective: Objective = Objective()
    resource: str = Field(default=GPU, description="the capacity the jobs share")
    restart_seconds: float = Field(
        default=RESCALE_STALL_SECONDS,
        ge=0,
        description="stall of one rescale (a job's own value wins)",
    )
    horizon_seconds: PositiveFloat = Field(
        default=600.0, description="how long a new allocation is expected to last"
    )
    max_gap: float = Field(default=0.0, ge=0, le=0.1, description="0 = provably optimal")
    model: ThroughputModel = EXPLORING


class SpeedupOptimizerConfig(GlobalOptimizerConfig):
    """The optimizer blind to the work left: speedups, explored one worker at a time."""

    objective: Objective = Objective(kind="proportional")
    model: ThroughputModel = ThroughputModel()


Solve = Callable[..., Allocation]


class GlobalOptimizer:
    def __init__(
        self,
        config: GlobalOptimizerConfig,
        *,
        solve: Solve | None = None,
        reason: str = "OptimalAllocation",
        reporting: Reporting | None = None,
    ) -> None:
        self.config = config
        self.solve: Solve = solve or self._exact
        self.reason = reason
        # Scored by the objective it optimises, on the curves it decides from.
        self.reporting = reporting or Reporting(objective=config.objective, model=config.model)

    def _exact(self, **problem: object) -> Allocation:
        return solve_allocation(**problem, max_gap=self.config.max_gap)  # type: ignore[arg-type]

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        curves = [job_curve(job, model=self.config.model) for job in snapshot.jobs]
        values = [
            self._values(job, curve) for job, curve in zip(snapshot.jobs, curves, strict=True)
        ]
        lows = np.array([job.min_replicas for job in snapshot.jobs], dtype=np.int64)
        sizes = np.array([self._size(job) for job in snapshot.jobs], dtype=np.float64)
        try:
            allocation = self.solve(
                values=values,
                lows=lows,
                sizes=sizes,
                capacity=self._capacity(snapshot, sizes=sizes),
            )
        except InsufficientCapacity as error:
            return _smallest(snapshot.jobs, values=values, why=str(error))
        return [
            self._decision(job, curve, count=int(count), allocation=allocation)
            for job, curve, count in zip(snapshot.jobs, curves, allocation.counts, strict=True)
        ]

    def _values(self, job: JobSnapshot, curve: JobCurve) -> Floats:
        """Utility of every count; only the current count when nothing is known of the job."""
        current = current_count(job) - job.min_replicas
        if not curve.known:
            values = np.full(len(curve.throughput), -np.inf)
            values[current] = 0.0
            return values
        restart = (
            job.restart_seconds if job.restart_seconds is not None else self.config.restart_seconds
        )
        objective = self.config.objective
        if objective.over_remaining_time:
            seconds = remaining_seconds(job, curve)
            stalls = self._stalls(seconds, restart=restart)
            stalls[current] = 0.0
            values = objective.utility(seconds + stalls, weight=job.weight)
        else:
            kept = max(0.0, 1.0 - restart / self.config.horizon_seconds)
            factors = np.full(len(curve.throughput), kept)
            factors[current] = 1.0
            speedup = np.nan_to_num(curve.speedup, nan=0.0) * factors
            values = objective.utility(speedup, weight=job.weight)
        counts = np.arange(job.min_replicas, job.max_replicas + 1)
        forbidden = np.isnan(curve.speedup) | ~np.array([job.allows(int(n)) for n in counts])
        values[forbidden] = -np.inf
        if not np.isfinite(values).any():  # nothing allowed is known yet: stay
            values[current] = 0.0
        return values

    def _stalls(self, seconds: Floats, *, restart: float) -> Floats:
        """What a rescale adds to a job's remaining time: its stall, or, for a job that outlasts
        the horizon, the horizon's share lost to the stall (a new count is only expected to last
        that long, so a gain must be worth a restart within it)."""
        training = max(self.config.horizon_seconds - restart, restart)
        return restart * np.maximum(1.0, np.nan_to_num(seconds, nan=0.0) / training)

    def _size(self, job: JobSnapshot) -> float:
        return job.resources_per_replica.get(self.config.resource, 0.0)

    def _capacity(self, snapshot: Snapshot, *, sizes: Floats) -> float:
        unlimited = float(
            sum(job.max_replicas * size for job, size in zip(snapshot.jobs, sizes, strict=True))
        )
        return snapshot.capacity.get(self.config.resource, unlimited)

    def _decision(
        self, job: JobSnapshot, curve: JobCurve, *, count: int, allocation: Allocation
    ) -> Decision:
        if not curve.known:
            return _keep(job, "NoThroughputData", "no throughput observed yet: keeping the count")
        gap = f", gap {allocation.gap:.2%}" if allocation.gap > 0 else ""
        message = (
            f"{count} workers: predicted {curve.at(count):.4g} samples/s, speedup"
            f" {curve.at(count) / curve.throughput[0]:.3g} over {job.min_replicas}"
            f" ({self.config.objective.kind} objective{gap})"
        )
        return Decision(job.namespace, job.name, count, self.reason, message)


def _smallest(jobs: Sequence[JobSnapshot], *, values: Sequence[Floats], why: str) -> list[Decision]:
    """Overloaded (held jobs and minimums exceed the capacity): every job at its smallest allowed
    count, so the pods still waiting can start; held jobs keep theirs."""
    message = f"{why}: every job at its smallest count until the waiting pods fit"
    return [
        Decision(job.namespace, job.name, job.min_replicas + int(np.argmax(np.isfinite(v))),
                 "InsufficientCapacity", message)
        for job, v in zip(jobs, values, strict=True)
    ]  # fmt: skip


def _keep(job: JobSnapshot, reason: str, message: str) -> Decision:
    return Decision(job.namespace, job.name, current_count(job), reason, message)


class GreedyConfig(PolicyConfig):
    resource: str = Field(default=GPU, description="the capacity the jobs share")
    model: ThroughputModel = ThroughputModel()


def speedup_greedy(config: GreedyConfig) -> GlobalOptimizer:
    """Marginal allocation on (log) speedup: the next worker to the job whose speedup gains most
    per resource, blind to the work left (how Optimus' allocation is often reimplemented)."""
    pure = SpeedupOptimizerConfig(resource=config.resource, restart_seconds=0.0, model=config.model)
    return GlobalOptimizer(
        pure, solve=greedy_allocation, reason="MarginalGain", reporting=_greedy_reporting(config)
    )


def optimus(config: GreedyConfig) -> GlobalOptimizer:
    """Optimus (EuroSys'18) as it allocates: the next worker to the job whose estimated remaining
    time it shortens most, per resource, with the remaining work known ("Optimus+Oracle" as the
    Pollux artifact reimplements it); a rescale is not priced."""
    remaining = Objective(kind="completion-time", exponent=1.0)
    pure = GlobalOptimizerConfig(
        objective=remaining, resource=config.resource, restart_seconds=0.0, model=config.model
    )
    return GlobalOptimizer(
        pure,
        solve=greedy_allocation,
        reason="RemainingTimeGain",
        reporting=_greedy_reporting(config),
    )


def _greedy_reporting(config: GreedyConfig) -> Reporting:
    """The greedy allocators have no objective to configure: they are scored as the baselines
    are, by the default objective, on the curves of their own model."""
    return Reporting(model=config.model)


SPEEDUP_GREEDY = PolicyPlugin(
    name="speedup-greedy",
    summary="marginal speedup: one worker at a time to the job whose throughput gains most",
    config_model=GreedyConfig,
    build=speedup_greedy,
)
OPTIMUS = PolicyPlugin(
    name="optimus",
    summary="Optimus: one worker at a time to the job whose remaining time shrinks most",
    config_model=GreedyConfig,
    build=optimus,
)
SPEEDUP_OPTIMIZER = PolicyPlugin(
    name="speedup-optimizer",
    summary="every job's count at once, exactly optimal for a speedup objective (no work known)",
    config_model=SpeedupOptimizerConfig,
    build=GlobalOptimizer,
)
PLUGIN = PolicyPlugin(
    name="global-optimizer",
    summary="every job's count at once, exactly optimal for the jobs' completion times",
    config_model=GlobalOptimizerConfig,
    build=GlobalOptimizer,
)
