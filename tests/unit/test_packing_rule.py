"""The planned placement: a job's workers placed as one unit, packed, and the simulator's state
under it."""

from dataclasses import replace

import pytest

from autoscaler.api.packing import fewest_nodes, home, kept, nodes_needed, packed
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.state import Phase, SimJob, SimState, is_spread
from autoscaler.sim.workload import WorkloadJob


@pytest.mark.parametrize(
    ("count", "size", "per_node", "needed"),
    [(0, 1, 4, 0), (1, 1, 4, 1), (4, 1, 4, 1), (5, 1, 4, 2), (3, 2, 4, 2), (2, 3, 8, 1)],
)
def test_nodes_needed_is_the_fewest_nodes_the_gpus_fill(
    count: int, size: int, per_node: int, needed: int
) -> None:
    assert nodes_needed(count, size=size, per_node=per_node) == needed


@pytest.mark.parametrize(
    ("free", "count", "size", "nodes"),
    [
        pytest.param([4, 2, 3], 2, 1, [1, 1], id="the tightest node that holds them all"),
        pytest.param([4, 2, 3], 3, 1, [2, 2, 2], id="3 pods: the tightest node that holds them"),
        pytest.param([1, 4, 3, 4], 6, 1, [1, 1, 1, 1, 2, 2], id="the roomiest, then the tightest"),
        pytest.param([1, 1, 1], 2, 1, [0, 1], id="spread when nothing holds them"),
        pytest.param([1, 2], 5, 1, [1, 1, 0], id="fewer pods when the GPUs hold fewer"),
        pytest.param([3, 4, 2], 2, 2, [1, 1], id="2-GPU pods: node 0 holds one only"),
        pytest.param([], 1, 1, [], id="no node"),
    ],
)
def test_fewest_nodes_keeps_roomy_nodes_whole(
    free: list[int], count: int, size: int, nodes: list[int]
) -> None:
    assert fewest_nodes(free, count=count, size=size) == nodes


@pytest.mark.parametrize(
    ("free", "current", "nodes"),
    [
        pytest.param([2, 2], {0: 1}, [1, 1], id="a growth stays on worker-0's node"),
        pytest.param([2, 2, 2], {0: 2, 1: 1}, [2, 2], id="worker-0's node before another"),
        pytest.param([4, 2, 2], {0: 1}, [1, 1], id="the tightest node first, then home"),
        pytest.param([1, 3, 3], {0: 2}, [2, 2, 2, 0], id="home among the roomiest"),
        pytest.param([2, 2], {}, [0, 0], id="no home: the first"),
    ],
)
def test_between_nodes_as_roomy_a_job_keeps_to_its_own(
    free: list[int], current: dict[int, int], nodes: list[int]
) -> None:
    count = len(nodes)
    assert fewest_nodes(free, count=count, size=1, prefer=home(current)) == nodes


def test_home_weighs_worker_0s_node_above_any_other() -> None:
    assert home({0: 3, 1: 1, 2: 1, 3: 1}) == {3: 5, 1: 3}
    assert home({1: 2, 2: 2}) == {2: 2}  # no worker-0: its pods alone


@pytest.mark.parametrize(
    ("free", "low", "high", "nodes"),
    [
        pytest.param([2, 2, 4], 1, 4, [2, 2, 2, 2], id="all of it packed"),
        pytest.param([2, 3, 3], 1, 4, [1, 1, 1], id="the most that packs: 3 of 4"),
        pytest.param([3, 3, 2], 4, 6, [0, 0, 0, 1, 1, 1], id="6 on two nodes of 3 free"),
        pytest.param([1, 1, 1], 2, 3, None, id="not even the least packs"),
        pytest.param([0, 0], 1, 2, None, id="no room"),
    ],
)
def test_packed_takes_the_most_pods_that_fill_their_nodes(
    free: list[int], low: int, high: int, nodes: list[int] | None
) -> None:
    found = packed(free, low=low, high=high, size=1, per_node=4)
    assert found == nodes
    if found is not None:
        assert not is_spread(found, gpus_per_replica=1, gpus_per_node=4)


@pytest.mark.parametrize(
    ("current", "target", "stay", "fill"),
    [
        ({0: 0, 1: 1, 2: 1}, [1, 1, 1], [1, 2], [1]),  # node 0's pod moves to node 1
        ({0: 2, 1: 2}, [0, 0, 0], [], [0, 0, 0]),  # every pod moves
        ({0: 0, 1: 0, 2: 0}, [0, 0], [0, 1], []),  # one goes, the highest index
        ({}, [3, 3], [], [3, 3]),
    ],
)
def test_a_replaced_job_keeps_the_pods_whose_node_stays(
    current: dict[int, int], target: list[int], stay: list[int], fill: list[int]
) -> None:
    assert kept(current, target) == (stay, fill)


def spec(name: str, *, asked: int, low: int = 1, torchft: bool = False) -> WorkloadJob:
    job = WorkloadJob(name, 0.0, "linear", 10, 10**6, low, 8, asked)
    return replace(job, torchft=torchft)


def running(job: WorkloadJob, pods: dict[int, int]) -> SimJob:
    rates = tuple(float(n) for n in range(job.max_replicas + 1))
    return SimJob(spec=job, rates=rates, phase=Phase.RUNNING, replicas=len(pods), pods=pods)


def state_of(*jobs: SimJob, nodes: int = 3, used: list[int] | None = None) -> SimState:
    """Nodes of 4 GPUs; `used` GPUs per node held by pods outside these jobs."""
    state = SimState(jobs=list(jobs), nodes=[4] * nodes, restart_seconds=30.0, planned=True)
    state.free = [4 - taken for taken in used or [0] * nodes]
    for job in jobs:
        for node in job.pods.values():
            state.free[node] -= 1
    state.now = 100.0
    return state


def test_a_growing_job_is_replaced_packed_and_restarts() -> None:
    a = running(spec("a", asked=2), {0: 0, 1: 1})  # spread by earlier binding
    state = state_of(a, used=[1, 3, 0])
    a.replicas = 4
    state.schedule()
    assert sorted(a.pods.values()) == [2, 2, 2, 2]
    assert state.free == [3, 1, 0]
    assert (a.rescales, a.stall_until) == (1, 130.0)


def test_a_growth_that_cannot_pack_waits_where_it_was() -> None:
    a = running(spec("a", asked=2), {0: 0, 1: 0})
    state = state_of(a, used=[2, 3, 3])  # one GPU free on each of nodes 1 and 2
    a.replicas = 4
    state.schedule()
    assert (a.pods, state.free) == ({0: 0, 1: 0}, [0, 1, 1])
    assert (a.active, a.rescales) == (2, 0)  # its two pods wait: no restart


def test_a_growth_takes_the_part_that_packs() -> None:
    a = running(spec("a", asked=2), {0: 0, 1: 0})
    state = state_of(a, used=[0, 3, 3])  # free: 2, 1 and 1
    a.replicas = 6
    state.schedule()
    assert (a.pods, a.active) == ({0: 0, 1: 0, 2: 0, 3: 0, 4: 1}, 5)  # two nodes; one waits
    assert a.rescales == 1


def test_a_restart_regroups_a_job_on_fewer_nodes() -> None:
    a = running(spec("a", asked=3), {0: 0, 1: 1, 2: 1})
    state = state_of(a, used=[2, 0, 4])
    state.set_replicas(a, 2)  # index 2 leaves (worker 0's node is emptied last); it restarts
    state.schedule()
    assert (a.pods, state.free) == ({0: 0, 1: 0}, [0, 4, 0])  # the tightest node that holds it
    state.now = 200.0
    state.set_replicas(a, 3)
    state.schedule()
    assert sorted(a.pods.values()) == [1, 1, 1]
    assert a.rescales == 2


def test_a_queued_job_starts_only_packed() -> None:
    b = spec("b", asked=3, low=2)
    queued = SimJob(spec=b, rates=(0.0, 1.0, 2.0, 3.0), phase=Phase.QUEUED, replicas=3)
    state = state_of(queued, used=[3, 3, 3])  # three GPUs free, one per node
    assert state.schedule() == []
    assert queued.phase is Phase.QUEUED
    state.free = [1, 2, 1]
    assert state.schedule() == [queued]
    assert queued.pods == {0: 1, 1: 1}  # two of three packed; the third waits


def test_the_largest_unit_is_placed_first() -> None:
    small = running(spec("small", asked=1), {0: 0})
    large = running(spec("large", asked=3), {0: 1, 1: 1, 2: 1})
    state = state_of(small, large, nodes=2, used=[2, 1])  # free: one on node 0
    small.replicas, large.replicas = 2, 4
    state.schedule()
    assert sorted(large.pods.values()) == [1, 1, 1]  # no packed growth for it: it stays
    assert sorted(small.pods.values()) == [0, 0]


def test_a_torchft_job_grows_as_the_scheduler_places_it() -> None:
    a = running(spec("a", asked=1, torchft=True), {0: 0})
    state = state_of(a, used=[3, 2, 0])
    a.replicas = 3
    state.schedule()
    assert a.pods[0] == 0
    assert sorted(a.pods.values()) == [0, 2, 2]


def test_a_simulation_with_planned_placement_spreads_no_job() -> None:
    """Two 4-GPU nodes: with the scheduler's placement c's two pods go one on each node (the
    placement tests' split case); planned, c starts with the one that packs."""
    profiles = {
        "linear": Profile(
            name="linear", gpu_counts=(1, 2, 4), rows=(ProfileRow(10, (1.0, 2.0, 4.0)),)
        )
    }
    jobs = [spec("a", asked=3), spec("b", asked=3), spec("c", asked=2)]
    config = SimConfig(gpus=8, gpus_per_node=4, horizon_seconds=600.0, planned_placement=True)
    sim = Simulation(workload=jobs, profiles=profiles, config=config)
    result = sim.run(decide_round=lambda _now: None)
    placed = {job.spec.name: sorted(job.pods.values()) for job in sim.state.jobs}
    assert placed == {"a": [0, 0, 0], "b": [1, 1, 1], "c": [0]}
    assert (result.spread_rounds, result.job_rounds) == (0, 3 * sim.rounds)
