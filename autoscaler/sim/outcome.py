"""What a comparison found: each policy's run, the bounds beside them, and their ratios.

`autoscaler.sim.comparison` builds these and `autoscaler.sim.report` reads them; neither imports
the other for them.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.sim.bounds import LowerBound
from autoscaler.sim.lp_bound import LpBound
from autoscaler.sim.results import RunResult
from autoscaler.sim.simulation import SimConfig
from autoscaler.sim.workload import WorkloadJob


@dataclass(frozen=True)
class PolicyRun:
    """One policy's run: the simulation's result and the policy's time per round."""

    name: str
    result: RunResult
    solve_seconds: tuple[float, ...]  # wall-clock time of each round's decision
    fallbacks: int  # rounds in which the policy failed or overran (every count kept)
    model: str = "-"  # the throughput model it decides on (`lineup.model_of`, or `oracle`)

    @property
    def mean_solve_seconds(self) -> float | None:
        solves = self.solve_seconds
        return sum(solves) / len(solves) if solves else None


@dataclass(frozen=True)
class Outcome:
    """The runs of a comparison beside the bounds (`comparison.Comparison` adds its reports)."""

    runs: Mapping[str, PolicyRun]  # in the order the policies were given
    lower_bound: LowerBound  # each job alone
    lp_bound: LpBound  # the time-indexed relaxation: the mean JCT's yardstick
    config: SimConfig
    workload: tuple[WorkloadJob, ...]
    # The default policy (else the first) again with every job in torchft mode.
    torchft: PolicyRun | None = None

    @property
    def rejected(self) -> tuple[tuple[str, str], ...]:
        """(name, reason) of every job the cluster can never run (the same in every run)."""
        first = next(iter(self.runs.values()))
        return tuple((j.name, j.reason) for j in first.result.jobs if j.status == "rejected")

    def ratios(self, name: str) -> dict[str, float | None]:
        """Mean JCT over the LP bound; p95 JCT and makespan over the each-job-alone bounds."""
        result, bound = self.runs[name].result, self.lower_bound
        return {
            "mean_jct": _ratio(result.mean_jct, self.lp_bound.mean_jct),
            "p95_jct": _ratio(result.p95_jct, bound.p95_jct),
            "makespan": _ratio(result.makespan, bound.makespan),
        }


def _ratio(value: float | None, bound: float | None) -> float | None:
    return value / bound if value is not None and bound else None
