"""`global-optimizer`: every job's count at once, exactly optimal for the stated objective.

Each job's throughput curve comes from its throughput model. With the default objective
(`completion-time`) a count is worth what finishing the job's remaining work there is worth: its
expected remaining seconds, plus the stall of a rescale when the count changes (the cost priced
in time, so a job near its end is not restarted for a few seconds' gain, and a long one is).
Each job's term is weighted by a power of its rank in remaining work
(`speedup.completion_weights`), so the jobs that finish first are served first, as heSRPT has it.
With an objective over speedups (`speedup-optimizer`, `pollux-style`), a count other than the
current one is worth its speedup times `1 - restart_seconds / horizon_seconds`. Either way
the rescale is paid inside the optimisation, not filtered afterwards, and the multiple-choice
knapsack over the chosen resource is solved exactly (`solver.solve_allocation`).
"""

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal, Self

import numpy as np
import numpy.typing as npt
from pydantic import Field, PositiveFloat, model_validator

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
from autoscaler.policies.speedup import (
    JobCurve,
    completion_weights,
    current_count,
    job_curve,
    remaining_samples,
    seconds_to_finish,
    smallest,
    speedup_over,
)
from autoscaler.policies.throughput_model import EXPLORING, ThroughputModel
from autoscaler.torchrun import RESCALE_STALL_SECONDS

GPU = c.GPU_RESOURCE
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


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
    restart_discount: Literal["horizon", "age"] = Field(
        default="horizon",
        description="with an objective over speedups, what share of a new count's speedup a"
        " rescale leaves: `horizon`, 1 - restart / horizon; `age`, Pollux's restart factor"
        " max(age - rescales x restart, 0) / (age + restart), so a job rescaled often for its"
        " age is rescaled less (Qiao et al., OSDI'21, and its artifact's `pollux.py`); 1 for a"
        " job whose snapshot gives no age",
    )
    hold_seconds: PositiveFloat = Field(
        default=3600.0,
        description="how long a preemptible job held back is taken to wait when the snapshot"
        " carries no engine bounds (with them: their max_held_seconds, the longest a hold lasts)",
    )
    max_gap: float = Field(default=0.0, ge=0, le=0.1, description="0 = provably optimal")
    model: ThroughputModel = EXPLORING

    @model_validator(mode="after")
    def _discount_over_speedups(self) -> Self:
        if self.restart_discount != "horizon" and self.objective.over_remaining_time:
            raise ValueError(
                "restart_discount applies to objectives over speedups: completion-time prices a"
                " rescale by its stall"
            )
        return self


class SpeedupOptimizerConfig(GlobalOptimizerConfig):
    """The optimizer blind to the work left: speedups."""

    objective: Objective = Objective(kind="proportional")


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
        hold_seconds = (
            snapshot.bounds.max_held_seconds if snapshot.bounds else self.config.hold_seconds
        )
        values, holds = self._valued(snapshot.jobs, curves, hold_seconds=hold_seconds)
        sizes = np.array([self._size(job) for job in snapshot.jobs], dtype=np.float64)
        capacity = self._capacity(snapshot, sizes=sizes)
        if _minimums_fit(snapshot.jobs, sizes=sizes, capacity=capacity):
            holds = [None] * len(holds)  # nobody needs to wait, so nobody is made to
        values = [
            value if hold is None else _with_zero(value, hold, low=job.min_replicas)
            for job, value, hold in zip(snapshot.jobs, values, holds, strict=True)
        ]
        lows = np.array(
            [
                0 if hold is not None else job.min_replicas
                for job, hold in zip(snapshot.jobs, holds, strict=True)
            ],
            dtype=np.int64,
        )
        try:
            allocation = self.solve(values=values, lows=lows, sizes=sizes, capacity=capacity)
        except InsufficientCapacity as error:
            return _smallest(snapshot.jobs, values=values, lows=lows, why=str(error))
        why = self._why(allocation)
        return [
            self._decision(job, curve, count=int(count), why=why)
            for job, curve, count in zip(snapshot.jobs, curves, allocation.counts, strict=True)
        ]

    def _all_values(self, jobs: Sequence[JobSnapshot], curves: Sequence[JobCurve]) -> list[Floats]:
        """Utility of every count of every job (`_valued` without the holds)."""
        return self._valued(jobs, curves, hold_seconds=self.config.hold_seconds)[0]

    def _valued(
        self, jobs: Sequence[JobSnapshot], curves: Sequence[JobCurve], *, hold_seconds: float
    ) -> tuple[list[Floats], list[float | None]]:
        """Utility of every count of every job; only the current count when nothing is known of
        a job. Known jobs are valued a table at a time, one row per job, the jobs of a table
        with count ranges equally long: a numpy call costs about the same whatever its size, so
        valuing job by job would spend a large round on call overhead (`make bench-scale`).
        Also the utility of holding each job back (0 workers), for the preemptible known jobs
        under a remaining-time objective; None for the others."""
        alike: dict[int, list[int]] = defaultdict(list)
        for index, curve in enumerate(curves):
            if curve.known:
                alike[len(curve.throughput)].append(index)
        weights = completion_weights(jobs, curves, objective=self.config.objective)
        valued: dict[int, Floats] = {}
        holds: dict[int, float] = {}
        for indices in alike.values():
            table, held = self._table(
                [jobs[i] for i in indices],
                [curves[i] for i in indices],
                weights=weights[indices],
                hold_seconds=hold_seconds,
            )
            valued.update(zip(indices, table, strict=True))
            holds.update(
                (i, float(h)) for i, h in zip(indices, held, strict=True) if np.isfinite(h)
            )
        values = [
            valued[index] if index in valued else _staying(job, curve)
            for index, (job, curve) in enumerate(zip(jobs, curves, strict=True))
        ]
        return values, [
            holds.get(index) if job.preemptible else None for index, job in enumerate(jobs)
        ]

    def _table(
        self,
        jobs: Sequence[JobSnapshot],
        curves: Sequence[JobCurve],
        *,
        weights: Floats,
        hold_seconds: float,
    ) -> tuple[Floats, Floats]:
        """Utility of every count (columns) of known jobs whose ranges are equally long (rows),
        and of holding each back (-inf where it has none: a speedup objective, no time known).

        Held back, a job is taken to wait `hold_seconds`, the longest the engine's starvation
        bound lets it (valued at one horizon's wait, jobs were held back too readily: `make
        bench-sim`'s queueing rows), then to pay a restart and finish at its smallest count: its
        remaining time is `hold + restart + E(min)`. A waiting job (held back, or not started
        yet) pays its start's restart once at every count, now or after the hold alike (not the
        horizon's share a rescale of a long job is priced at: so priced, long jobs stayed held
        back until the bound); a running one pays a rescale's at every count but its own. A
        waiting job is valued by its model curve (`curve`) while it has no observations.
        `weights`: each job's weight in the objective (`completion_weights`)."""
        throughput = np.array([curve.throughput for curve in curves], dtype=np.float64)
        speedup = speedup_over(throughput, throughput[:, :1])
        rows = np.arange(len(jobs))
        current = np.array([current_count(job) - job.min_replicas for job in jobs])
        restarts = [self._restart(job) for job in jobs]
        weights = weights[:, None]
        objective = self.config.objective
        if objective.over_remaining_time:
            samples = [
                remaining_samples(job, curve) for job, curve in zip(jobs, curves, strict=True)
            ]
            seconds = seconds_to_finish(_column(samples), throughput)
            stalls = self._stalls(seconds, restarts=restarts)
            running = np.array([not (job.suspended or job.waiting) for job in jobs])
            stalls[rows[running], current[running]] = 0.0
            stalls[~running] = _column(restarts)[~running]
            values = objective.utility(seconds + stalls, weight=weights)
            waited = hold_seconds + _column(restarts)[:, 0] + seconds[:, 0]
            holds = objective.utility(waited[:, None], weight=weights)[:, 0]
        else:
            kept = [self._kept(job, restart) for job, restart in zip(jobs, restarts, strict=True)]
            factors = np.repeat(_column(kept), throughput.shape[1], axis=1)
            factors[rows, current] = 1.0
            values = objective.utility(np.nan_to_num(speedup, nan=0.0) * factors, weight=weights)
            holds = np.full(len(jobs), -np.inf)
        values[np.isnan(speedup) | ~_allowed(jobs, width=throughput.shape[1])] = -np.inf
        stuck = ~np.isfinite(values).any(axis=1)  # nothing allowed is known yet: stay
        values[rows[stuck], current[stuck]] = 0.0
        holds[stuck | ~np.isfinite(holds)] = -np.inf
        return values, holds

    def _kept(self, job: JobSnapshot, restart: float) -> float:
        """The share of a new count's speedup left after its rescale (`restart_discount`)."""
        if self.config.restart_discount == "horizon":
            return max(0.0, 1.0 - restart / self.config.horizon_seconds)
        if restart == 0 or job.age_seconds is None:  # no age given: nothing to discount by
            return 1.0
        return max(0.0, job.age_seconds - job.rescales * restart) / (job.age_seconds + restart)

    def _restart(self, job: JobSnapshot) -> float:
        own = job.restart_seconds
        return own if own is not None else self.config.restart_seconds

    def _stalls(self, seconds: Floats, *, restarts: Sequence[float]) -> Floats:
        """What a rescale adds to each job's (rows) remaining time: its stall, or, for a job that
        outlasts the horizon, the horizon's share lost to the stall (a new count is only expected
        to last that long, so a gain must be worth a restart within it)."""
        horizon = self.config.horizon_seconds
        training = [max(horizon - restart, restart) for restart in restarts]
        lost = np.maximum(1.0, np.nan_to_num(seconds, nan=0.0) / _column(training))
        return _column(restarts) * lost

    def _size(self, job: JobSnapshot) -> float:
        return job.resources_per_replica.get(self.config.resource, 0.0)

    def _capacity(self, snapshot: Snapshot, *, sizes: Floats) -> float:
        unlimited = float(
            sum(job.max_replicas * size for job, size in zip(snapshot.jobs, sizes, strict=True))
        )
        return snapshot.capacity.get(self.config.resource, unlimited)

    def _decision(self, job: JobSnapshot, curve: JobCurve, *, count: int, why: str) -> Decision:
        if count == 0:
            message = f"held back: the others finish sooner while it waits {why}"
            return Decision(job.namespace, job.name, 0, self.reason, message)
        if not curve.known:
            return _keep(job, "NoThroughputData", "no throughput observed yet: keeping the count")
        predicted = curve.at(count)
        message = (
            f"{count} workers: predicted {predicted:.4g} samples/s, speedup"
            f" {predicted / curve.throughput[0]:.3g} over {job.min_replicas} {why}"
        )
        return Decision(job.namespace, job.name, count, self.reason, message)

    def _why(self, allocation: Allocation) -> str:
        """The end of every decision's message: the objective, and the gap if not optimal."""
        gap = f", gap {allocation.gap:.2%}" if allocation.gap > 0 else ""
        return f"({self.config.objective.kind} objective{gap})"


def _smallest(
    jobs: Sequence[JobSnapshot], *, values: Sequence[Floats], lows: Ints, why: str
) -> list[Decision]:
    """Overloaded (held jobs and minimums exceed the capacity even with the preemptible jobs
    held back): every job at its smallest count, so the pods still waiting can start; held jobs
    keep theirs. No running job is held back here (nothing says which): one held back stays."""
    message = f"{why}: every job at its smallest count until the waiting pods fit"
    decisions = []
    for job, v, low in zip(jobs, values, lows, strict=True):
        finite = np.isfinite(v)
        if low == 0 and not job.suspended:
            finite[0] = False
        count = int(low) + int(np.argmax(finite))
        decisions.append(Decision(job.namespace, job.name, count, "InsufficientCapacity", message))
    return decisions


def _minimums_fit(jobs: Sequence[JobSnapshot], *, sizes: Floats, capacity: float) -> bool:
    """Whether every job fits at its minimum at once. Only when they do not is a job held back:
    held while all fit, long jobs waited up to the starvation bound for others' small gains, and
    mean and p95 JCT lengthened on both tuning sets (`docs/benchmarks.md`, Queueing)."""
    lows = np.array([smallest(job) for job in jobs], dtype=np.float64)
    return float(lows @ sizes) <= capacity


def _with_zero(values: Floats, hold: float, *, low: int) -> Floats:
    """A job's utilities from 0 workers: `hold` at 0, none below its minimum `low`."""
    return np.concatenate([[hold], np.full(low - 1, -np.inf), values])


def _staying(job: JobSnapshot, curve: JobCurve) -> Floats:
    """Nothing known of the job: only its current count has a value."""
    values = np.full(len(curve.throughput), -np.inf)
    values[current_count(job) - job.min_replicas] = 0.0
    return values


def _allowed(jobs: Sequence[JobSnapshot], *, width: int) -> Bools:
    """Whether each job (rows) may run at each count of its range (columns)."""
    allowed = np.ones((len(jobs), width), dtype=np.bool_)
    for row, job in enumerate(jobs):
        if job.allowed_replicas is not None:  # else every count within its bounds
            counts = range(job.min_replicas, job.max_replicas + 1)
            allowed[row] = [job.allows(count) for count in counts]
    return allowed


def _column(numbers: Sequence[float]) -> Floats:
    return np.array(numbers, dtype=np.float64)[:, None]


def _keep(job: JobSnapshot, reason: str, message: str) -> Decision:
    return Decision(job.namespace, job.name, current_count(job), reason, message)


class GreedyConfig(PolicyConfig):
    resource: str = Field(default=GPU, description="the capacity the jobs share")
    model: ThroughputModel = EXPLORING


def speedup_greedy(config: GreedyConfig) -> GlobalOptimizer:
    """Marginal allocation on (log) speedup: the next worker to the job whose speedup gains most
    per resource, blind to the work left (how Optimus' allocation is often reimplemented)."""
    pure = SpeedupOptimizerConfig(resource=config.resource, restart_seconds=0.0, model=config.model)
    return GlobalOptimizer(
        pure, solve=greedy_allocation, reason="MarginalGain", reporting=_greedy_reporting(config)
    )


def optimus(config: GreedyConfig) -> GlobalOptimizer:
    """Optimus (EuroSys'18) as it allocates: the next worker to the job whose estimated remaining
    time it shortens most, per resource, with the remaining work known; a rescale is not priced.
    Given each job's true rates as well (declared profiles the engine trusts, as the simulator's
    goodput runs give them) it is "Optimus+Oracle" as the Pollux artifact reimplements it."""
    remaining = Objective(kind="completion-time", exponent=1.0, rank_exponent=0.0)
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
