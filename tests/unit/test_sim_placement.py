"""Where the simulator places worker pods, and how often a job is spread over more nodes than
its GPUs fill."""

from dataclasses import replace
from datetime import datetime

import pytest

from autoscaler.controller import placement as operator
from autoscaler.sim.placement import TERM_WEIGHT, least_allocated, normalised, pick_node, scores
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.results import RunResult
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.state import Phase, SimJob, SimState, is_spread
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
    # placed as kube-scheduler places each pod: a and b fill 3 GPUs of each node, c's 2 pods
    # can only go one on each
    jobs = [job("a", asked=3), job("b", asked=3), job("c", asked=2)]
    sim, result = run(jobs, planned_placement=False)
    assert result.job_rounds == 3 * sim.rounds
    assert result.spread_rounds == sim.rounds  # a and b packed, c spread in every round
    assert result.spread_share == pytest.approx(result.spread_rounds / result.job_rounds)
    placed = {job.spec.name: sorted(job.pods.values()) for job in sim.state.jobs}
    assert placed == {"a": [0, 0, 0], "b": [1, 1, 1], "c": [0, 1]}


def test_by_default_a_job_that_would_be_split_runs_packed_at_fewer_workers() -> None:
    sim, result = run([job("a", asked=3), job("b", asked=3), job("c", asked=2)])
    assert result.spread_rounds == 0
    placed = {job.spec.name: sorted(job.pods.values()) for job in sim.state.jobs}
    assert placed == {"a": [0, 0, 0], "b": [1, 1, 1], "c": [0]}  # its second pod waits


def test_a_gang_that_does_not_fit_whole_binds_nothing() -> None:
    big = WorkloadJob("big", 0.0, "linear", 10, 10**6, 3, 8, 3, gpus_per_replica=3)
    sim, result = run([job("a", asked=2), big])  # a's 2 GPUs leave room for one 3-GPU pod only
    assert {job.spec.name: list(job.pods.values()) for job in sim.state.jobs} == {
        "a": [0, 0],
        "big": [],
    }
    assert result.spread_rounds == 0


def test_the_packing_term_weighs_what_the_operator_writes() -> None:
    assert TERM_WEIGHT == operator.WEIGHT


@pytest.mark.parametrize(
    ("free", "capacity", "size", "score"),
    [(4, 4, 1, 75), (1, 4, 1, 0), (8, 8, 3, 62), (3, 4, 4, 0), (0, 0, 1, 0), (2, 3, 1, 33)],
)
def test_least_allocated_scores_the_free_share_after_placing(
    free: int, capacity: int, size: int, score: int
) -> None:
    assert least_allocated(free, capacity, size) == score


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([], []),
        ([0, 0, 0], [0, 0, 0]),  # no worker anywhere: no preference
        ([300, 300], [0, 0]),  # the same on every feasible node
        ([0, 100, 200], [0, 50, 100]),
        ([100, 200, 400], [0, 33, 100]),  # from the minimum, truncated
    ],
)
def test_affinity_is_min_max_normalised_over_the_feasible_nodes(
    raw: list[int], expected: list[int]
) -> None:
    assert normalised(raw) == expected


@pytest.mark.parametrize(
    ("free", "own", "size", "expected", "node"),
    [
        # no worker yet: the emptiest node (least allocated); a tie to the lowest index
        ([4, 4], [0, 0], 1, [75, 75], 0),
        ([2, 4], [0, 0], 1, [25, 75], 1),
        # a worker on node 0: affinity 2 x 100 beats any spread of least allocated
        ([2, 4], [1, 0], 1, [225, 75], 0),
        ([1, 4], [2, 0], 1, [200, 75], 0),
        # its node full: the others only, the affinity normalised over them
        ([0, 3, 4], [3, 0, 0], 1, [None, 50, 75], 2),
        ([0, 1, 4], [3, 1, 0], 1, [None, 200, 75], 1),
        # more workers draw more: 2 on node 1 against 1 on node 0
        ([2, 1, 4], [1, 2, 0], 1, [25 + 100, 200, 75], 1),
        # no room for the pod anywhere
        ([1, 2], [0, 0], 3, [None, None], None),
        # a 2-GPU pod on 4-GPU nodes
        ([2, 4, 3], [1, 0, 0], 2, [200, 50, 25], 0),
    ],
)
def test_the_default_profile_scores_each_node(
    free: list[int], own: list[int], size: int, expected: list[int | None], node: int | None
) -> None:
    capacity = [4] * len(free)
    assert scores(free, capacity, own, size) == expected
    assert pick_node(free, capacity, own, size) == node


@pytest.mark.parametrize(
    ("torchft", "kept"),
    [
        pytest.param(False, {0: 0, 2: 0, 3: 0}, id="torchrun: the least-filled node's pod goes"),
        pytest.param(True, {0: 0, 1: 1, 2: 0}, id="torchft: the highest index goes"),
    ],
)
def test_a_scale_down_removes_the_pods_the_operator_would(
    torchft: bool, kept: dict[int, int]
) -> None:
    """The operator's rule (`autoscaler.api.worker_indices`): a regrowth refills index 1."""
    spec = replace(job("a", asked=4), torchft=torchft)
    sim_job = SimJob(spec=spec, rates=(0.0, 1.0, 2.0, 3.0, 4.0), phase=Phase.RUNNING, replicas=4)
    sim_job.pods = {0: 0, 1: 1, 2: 0, 3: 0}
    state = SimState(jobs=[sim_job], nodes=[4, 4], restart_seconds=30.0)
    state.free = [1, 3]
    state.set_replicas(sim_job, 3)
    assert (sim_job.pods, state.free) == (kept, [2, 3] if torchft else [1, 4])
    state.set_replicas(sim_job, 4)
    state.schedule()
    assert sorted(sim_job.pods) == [0, 1, 2, 3]
