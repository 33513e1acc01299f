"""Where the simulator places worker pods, and how often a job is spread over more nodes than
its GPUs fill."""

from datetime import datetime

import pytest

from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.results import RunResult
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.state import is_spread
from autoscaler.sim.workload import WorkloadJob

PROFILES = {
    "linear": Profile(
        name="linear", gpu_counts=(1, 2, 4, 8), rows=(ProfileRow(10, (1.0, 2.0, 4.0, 8.0)),)
    )
}


def job(name: str, *, asked: int, size: int = 1, iterations: int = 10**6) -> WorkloadJob:
    return WorkloadJob(name, 0.0, "linear", 10, iterations, 1, 8, asked, gpus_per_replica=size)


def run(jobs: list[WorkloadJob], **config: float) -> tuple[Simulation, RunResult]:
    settings = {"gpus": 8, "gpus_per_node": 4, "interval_seconds": 60.0,
                "horizon_seconds": 600.0, **config}  # fmt: skip
    sim = Simulation(workload=jobs, profiles=PROFILES, config=SimConfig(**settings))  # type: ignore[arg-type]

    def idle(_now: datetime) -> None:
        return None

    return sim, sim.run(decide_round=idle)


@pytest.mark.parametrize(
    ("pods", "size", "per_node", "spread"),
    [
        ((), 1, 4, False),  # no pod, no node
        ((0, 0, 0), 1, 4, False),
        ((0, 0, 1), 1, 4, True),  # 3 GPUs fit one node
        ((0, 0, 0, 0, 1), 1, 4, False),  # 5 GPUs need two
        ((0, 1, 2), 1, 4, True),
        ((0, 1), 3, 4, False),  # 6 GPUs need two nodes of 4
        ((0, 0, 1), 2, 4, False),
        ((0, 1, 2), 2, 4, True),  # 6 GPUs in 3 nodes
    ],
)
def test_a_job_is_spread_on_more_nodes_than_its_gpus_fill(
    pods: tuple[int, ...], size: int, per_node: int, spread: bool
) -> None:
    assert is_spread(pods, gpus_per_replica=size, gpus_per_node=per_node) is spread


def test_a_packed_job_counts_every_round_and_none_spread() -> None:
    sim, result = run([job("a", asked=6)])
    assert result.job_rounds == sim.rounds == 11  # rounds 0..600, the horizon
    assert result.spread_rounds == 0
    assert result.spread_share == 0.0


def test_no_job_ever_running_has_no_spread_share() -> None:
    _, result = run([job("too-big", asked=1, size=16)])  # rejected: larger than a node
    assert result.job_rounds == 0
    assert result.spread_share is None


def test_a_job_split_by_the_others_counts_as_spread() -> None:
    # a and b fill 3 GPUs of each node; c's 2 pods can only go one on each
    sim, result = run([job("a", asked=3), job("b", asked=3), job("c", asked=2)])
    assert result.job_rounds == 3 * sim.rounds
    assert result.spread_rounds >= sim.rounds  # c, in every round
    assert result.spread_share == pytest.approx(result.spread_rounds / result.job_rounds)
