"""Every built-in policy on table snapshots, loaded through the public registry."""

from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autoscaler.policies.contract import (
    Decision,
    JobSnapshot,
    PolicyConfig,
    PolicyPlugin,
    Reporting,
    Snapshot,
    reporting_of,
)
from autoscaler.policies.objective import Objective
from autoscaler.policies.registry import PolicyError, build, find, installed
from autoscaler.policies.speedup import objective_value
from autoscaler.policies.throughput_model import EXPLORING, ThroughputModel, curve
from tests.support.clock import NOW

GPU = "nvidia.com/gpu"
BUILT_INS = {
    "global-optimizer",
    "speedup-optimizer",
    "speedup-greedy",
    "optimus",
    "least-attained-service",
    "static",
    "equal-share",
    "hpa-like",
    "afs-l",
    "afs-p",
    "hesrpt",
    "tiresias",
}


def job(
    name: str, *, replicas: int = 2, low: int = 1, high: int = 8, size: float = 1.0, **extra: Any
) -> JobSnapshot:
    return JobSnapshot(
        namespace="ns",
        name=name,
        min_replicas=low,
        max_replicas=high,
        replicas=replicas,
        resources_per_replica={GPU: size},
        **extra,
    )


def table(shape: str, high: int = 8) -> dict[int, float]:
    shapes = {
        "linear": lambda n: 100.0 * n,
        "flat": lambda n: 100.0 + n,
        "sqrt": lambda n: 100.0 * n**0.5,
        "cliff": lambda n: 100.0 * n if n <= 4 else 100.0 * n * 0.5,  # a node boundary at 4
    }
    return {n: shapes[shape](n) for n in range(1, high + 1)}


def decide(name: str, snapshot: Snapshot, **config: Any) -> dict[str, tuple[int, str]]:
    policy = build(find(name), config)
    return {d.name: (d.replicas, d.reason) for d in policy.decide(snapshot, now=NOW)}


def test_every_built_in_is_installed_through_the_entry_point_group() -> None:
    assert set(installed()) >= BUILT_INS


@pytest.mark.parametrize(
    ("jobs", "gpus", "expected"),
    [
        (
            [job("a", throughput=table("linear")), job("b", throughput=table("flat"))],
            9,
            {"a": 8, "b": 1},
        ),
        (
            [job("a", throughput=table("sqrt")), job("b", throughput=table("sqrt"))],
            8,
            {"a": 4, "b": 4},
        ),
        # greedy would stop 'b' at 4 (the cliff); exact sees 8 x 0.5 x 100 = 400 = 4 x 100: keeps 4
        (
            [job("a", throughput=table("linear"), size=2), job("b", throughput=table("cliff"))],
            12,
            {"a": 4, "b": 4},
        ),
        ([job("a", throughput=table("linear"))], 100, {"a": 8}),
        (
            [job("a", throughput=table("linear")), job("b")],
            4,
            {"a": 2, "b": 2},
        ),  # no data: b is kept
    ],
)
def test_global_optimizer(jobs: list[JobSnapshot], gpus: float, expected: dict[str, int]) -> None:
    decided = decide(
        "global-optimizer", Snapshot(capacity={GPU: gpus}, jobs=jobs), restart_seconds=0
    )
    assert {name: n for name, (n, _) in decided.items()} == expected


def test_global_optimizer_reasons() -> None:
    snapshot = Snapshot(capacity={GPU: 8}, jobs=[job("a", throughput=table("linear")), job("b")])
    decided = decide("global-optimizer", snapshot)
    assert decided["a"][1] == "OptimalAllocation"
    assert decided["b"][1] == "NoThroughputData"


def test_global_optimizer_with_capacity_below_the_minimums_keeps_counts() -> None:
    snapshot = Snapshot(
        capacity={GPU: 3},
        jobs=[
            job("a", low=2, throughput=table("linear")),
            job("b", low=2, throughput=table("linear")),
        ],
    )
    assert decide("global-optimizer", snapshot) == {
        "a": (2, "InsufficientCapacity"),
        "b": (2, "InsufficientCapacity"),
    }


def test_rescale_cost_keeps_a_job_where_a_small_gain_does_not_pay() -> None:
    jobs = [
        job("a", replicas=4, throughput=table("sqrt")),
        job("b", replicas=4, throughput={**table("sqrt"), 5: 224.0}),
    ]
    snapshot = Snapshot(capacity={GPU: 9}, jobs=jobs)
    free = decide("global-optimizer", snapshot, restart_seconds=0)
    costly = decide("global-optimizer", snapshot, restart_seconds=300, horizon_seconds=600)
    assert sum(n for n, _ in free.values()) == 9
    assert {name: n for name, (n, _) in costly.items()} == {"a": 4, "b": 4}


@pytest.mark.parametrize(
    ("objective", "expected"),
    [
        ({"kind": "throughput"}, {"a": 7, "b": 1}),
        ({"kind": "proportional"}, {"a": 4, "b": 4}),
        ({"kind": "power-mean", "exponent": -1}, {"a": 4, "b": 4}),
    ],
)
def test_fairness_objectives_share_more_evenly(
    objective: dict[str, Any], expected: dict[str, int]
) -> None:
    jobs = [
        job("a", throughput=table("linear")),
        job("b", throughput={n: 100.0 * n**0.9 for n in range(1, 9)}),
    ]
    assert optimal_counts(jobs, gpus=8, objective=objective) == expected


def optimal_counts(
    jobs: list[JobSnapshot], *, gpus: float, objective: dict[str, Any]
) -> dict[str, int]:
    """The global optimizer's counts under `objective`, a rescale costing nothing."""
    snapshot = Snapshot(capacity={GPU: gpus}, jobs=jobs)
    decided = decide("global-optimizer", snapshot, objective=objective, restart_seconds=0)
    return {name: n for name, (n, _) in decided.items()}


CONCAVE = {n: 100.0 * n**0.8 for n in range(1, 13)}
UNRANKED = {"kind": "completion-time", "rank_exponent": 0}
HESRPT = {"kind": "completion-time", "rank_exponent": 1}


@pytest.mark.parametrize(
    ("objective", "remaining", "expected"),
    [
        # Three jobs alike (ties go by key): unranked, even shares; with heSRPT's ranks and
        # p = -1, the shares it gives speedup n^0.8 (1/3^5, (2/3)^5 - 1/3^5 and the rest of 12).
        (UNRANKED, (2e5, 2e5, 2e5), {"a": 4, "b": 4, "c": 4}),
        ({**UNRANKED, "exponent": -1}, (2e5, 2e5, 2e5), {"a": 4, "b": 4, "c": 4}),
        ({**HESRPT, "exponent": -1}, (2e5, 2e5, 2e5), {"a": 1, "b": 1, "c": 10}),
        (HESRPT, (2e5, 2e5, 2e5), {"a": 2, "b": 4, "c": 6}),
        ({}, (2e5, 2e5, 2e5), {"a": 3, "b": 4, "c": 5}),
        # Declaring no work, no job is ranked: its work left is a guess.
        ({}, (None, None, None), {"a": 4, "b": 4, "c": 4}),
        # The job with the least left gains most, the more so the higher the rank exponent.
        (UNRANKED, (1e5, 2e5, 3e5), {"a": 5, "b": 4, "c": 3}),
        ({}, (1e5, 2e5, 3e5), {"a": 6, "b": 4, "c": 2}),
        (HESRPT, (1e5, 2e5, 3e5), {"a": 7, "b": 4, "c": 1}),
    ],
)
def test_ranks_serve_jobs_in_their_finishing_order(
    objective: dict[str, Any], remaining: tuple[float | None, ...], expected: dict[str, int]
) -> None:
    jobs = [
        job(name, throughput=CONCAVE, high=12, remaining_samples=left)
        for name, left in zip("abc", remaining, strict=True)
    ]
    assert optimal_counts(jobs, gpus=12, objective=objective) == expected


def test_objective_value_is_computed_as_defined() -> None:
    jobs = [job("a", throughput=table("linear"), weight=2.0), job("b", throughput=table("sqrt"))]
    snapshot = Snapshot(capacity={GPU: 8}, jobs=jobs)
    replicas = {("ns", "a"): 4, ("ns", "b"): 4}
    model = ThroughputModel()
    throughput = Objective(kind="throughput")
    assert objective_value(snapshot, replicas, objective=throughput, model=model) == pytest.approx(
        2 * 4 + 2
    )
    pollux = Objective(kind="power-mean", exponent=-1)
    assert objective_value(snapshot, replicas, objective=pollux, model=model) == pytest.approx(
        2 / 4 + 1 / 2
    )
    log = Objective(kind="proportional")
    assert objective_value(snapshot, replicas, objective=log, model=model) == pytest.approx(
        2 * np.log(4) + np.log(2)
    )
    left = [job(name, throughput=table("linear"), remaining_samples=800.0) for name in "ab"]
    sized = Snapshot(capacity={GPU: 8}, jobs=[*left, job("c", throughput=table("linear"),
                                                         remaining_samples=1600.0)])  # fmt: skip
    # 8, 8 and 16 s left at one worker: ranks 2, 3 (a tie goes by key) and 1; E = 2, 2 and 8 s
    # at 4, 4 and 2 workers.
    for rank_exponent in (1.0, 0.5):
        ranked = Objective(kind="completion-time", exponent=-1, rank_exponent=rank_exponent)
        found = objective_value(sized, replicas, objective=ranked, model=model)
        assert found == pytest.approx((2**rank_exponent + 3**rank_exponent) / 2 + 1 / 8)


def test_speedup_greedy_stops_at_a_cliff_the_exact_optimizer_crosses() -> None:
    cliff = {n: 100.0 * n if n <= 4 else 100.0 * n * 0.45 + (n == 8) * 500 for n in range(1, 9)}
    snapshot = Snapshot(
        capacity={GPU: 9}, jobs=[job("a", throughput=cliff), job("b", throughput=table("flat"))]
    )
    greedy = decide("speedup-greedy", snapshot)
    exact = decide("speedup-optimizer", snapshot, restart_seconds=0)
    assert greedy["a"] == (4, "MarginalGain")
    assert exact["a"][0] == 8


def test_static_keeps_counts() -> None:
    snapshot = Snapshot(
        capacity={GPU: 1}, jobs=[job("a", replicas=5), job("b", replicas=9, high=8)]
    )
    assert decide("static", snapshot) == {"a": (5, "Static"), "b": (8, "Static")}


@pytest.mark.parametrize(
    ("jobs", "gpus", "expected"),
    [
        ([job("a"), job("b")], 8, {"a": 4, "b": 4}),
        ([job("a", size=2), job("b")], 9, {"a": 2, "b": 5}),  # about equal GPUs, not workers
        ([job("a", high=2), job("b")], 8, {"a": 2, "b": 6}),
        ([job("a", low=3), job("b")], 4, {"a": 3, "b": 1}),
    ],
)
def test_equal_share(jobs: list[JobSnapshot], gpus: float, expected: dict[str, int]) -> None:
    decided = decide("equal-share", Snapshot(capacity={GPU: gpus}, jobs=jobs))
    assert {name: n for name, (n, _) in decided.items()} == expected


@pytest.mark.parametrize(
    ("replicas", "shape", "expected"),
    [
        (2, "linear", (3, "ScaleUp")),  # efficiency 1 / 0.8 = 1.25: ceil(2.5)
        (4, "flat", (2, "ScaleDown")),  # efficiency 0.26: ceil(4 x 0.32)
        (8, "linear", (8, "AtLimit")),
        (2, "sqrt", (2, "WithinTolerance")),  # efficiency 0.707 / 0.8 = 0.88: within 0.15
    ],
)
def test_hpa_like(replicas: int, shape: str, expected: tuple[int, str]) -> None:
    snapshot = Snapshot(
        capacity={GPU: 8}, jobs=[job("a", replicas=replicas, throughput=table(shape))]
    )
    tolerance = 0.15 if shape == "sqrt" else 0.1
    assert decide("hpa-like", snapshot, tolerance=tolerance)["a"] == expected


@pytest.mark.parametrize("target", [0.5 * (1 - 1e-12), 0.5, 0.5 * (1 + 1e-12)])
def test_hpa_like_at_an_exact_ratio_does_not_hang_on_the_last_bits(target: float) -> None:
    """Efficiency 1 against a target of 0.5: 2 workers want exactly 4, either side of it."""
    snapshot = Snapshot(capacity={GPU: 8}, jobs=[job("a", replicas=2, throughput=table("linear"))])
    assert decide("hpa-like", snapshot, target_efficiency=target)["a"] == (4, "ScaleUp")


def test_unknown_config_keys_are_rejected_with_the_field() -> None:
    with pytest.raises(PolicyError, match=r"global-optimizer.*objektive.*Extra inputs"):
        build(find("global-optimizer"), {"objektive": {}})


SLOW_FIT = {"half_life_seconds": 60.0}


@pytest.mark.parametrize(
    ("name", "config", "expected"),
    [
        ("global-optimizer", {}, Reporting(objective=Objective(), model=EXPLORING)),
        (
            "speedup-optimizer",
            {"objective": {"kind": "proportional"}, "model": SLOW_FIT},
            Reporting(Objective(kind="proportional"), ThroughputModel(**SLOW_FIT)),
        ),
        # The greedy allocators and hpa-like: the default objective, on their own model.
        ("speedup-greedy", {"model": SLOW_FIT}, Reporting(model=ThroughputModel(**SLOW_FIT))),
        ("optimus", {"model": SLOW_FIT}, Reporting(model=ThroughputModel(**SLOW_FIT))),
        ("hpa-like", {"model": SLOW_FIT}, Reporting(model=ThroughputModel(**SLOW_FIT))),
        # No `reporting`: the defaults.
        ("static", {}, Reporting()),
        ("least-attained-service", {}, Reporting()),
        ("equal-share", {}, Reporting()),
    ],
)
def test_each_built_in_states_how_its_rounds_are_scored(
    name: str, config: dict[str, Any], expected: Reporting
) -> None:
    assert reporting_of(build(find(name), config)) == expected


@pytest.mark.parametrize(
    "name",
    ["global-optimizer", "speedup-optimizer", "speedup-greedy", "optimus", "hpa-like",
     "afs-l", "afs-p", "hesrpt"],
)  # fmt: skip
def test_every_resizing_built_in_decides_on_the_exploring_model_by_default(name: str) -> None:
    assert find(name).config_model().model == EXPLORING


class _Misreporting:
    reporting = "completion-time"

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config

    def decide(self, snapshot: Snapshot, *, now: datetime) -> list[Decision]:
        return []


def test_a_reporting_that_is_not_a_reporting_fails_the_build_naming_the_policy() -> None:
    plugin = PolicyPlugin(
        name="misreporting", summary="", config_model=PolicyConfig, build=_Misreporting
    )
    with pytest.raises(PolicyError, match=r"'misreporting': _Misreporting.reporting is a str"):
        build(plugin)


def test_unknown_policy_lists_the_installed_ones() -> None:
    with pytest.raises(PolicyError, match=r"unknown policy 'nope'; installed: .*global-optimizer"):
        find("nope")


def test_a_policy_file_is_loaded_through_the_same_door(tmp_path: Path) -> None:
    source = tmp_path / "keep_min.py"
    source.write_text(
        "from autoscaler.policies.contract import Decision, PolicyConfig, PolicyPlugin\n"
        "class Config(PolicyConfig):\n    pass\n"
        "class KeepMin:\n"
        "    def __init__(self, config): pass\n"
        "    def decide(self, snapshot, *, now):\n"
        "        return [Decision(j.namespace, j.name, j.min_replicas, 'Min', 'min') for j in snapshot.jobs]\n"
        "PLUGIN = PolicyPlugin(name='keep-min', summary='min', config_model=Config, build=KeepMin)\n"
    )
    snapshot = Snapshot(jobs=[job("a", low=2)])
    assert decide(str(source), snapshot) == {"a": (2, "Min")}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("raise RuntimeError('boom')", "fails to load: RuntimeError"),
        ("PLUGIN = 3", "does not export a PolicyPlugin"),
    ],
)
def test_broken_policy_files_say_why(tmp_path: Path, text: str, match: str) -> None:
    source = tmp_path / "broken.py"
    source.write_text(text)
    with pytest.raises(PolicyError, match=match):
        find(str(source))


def test_throughput_curve_uses_complete_tables_as_they_are() -> None:
    values = {1: 10.0, 2: 30.0, 3: 5.0}
    assert curve(points=values, ages={}, low=1, high=3, model=ThroughputModel()).tolist() == [
        10.0,
        30.0,
        5.0,
    ]


def test_throughput_fit_recovers_a_physical_curve_and_bounds_exploration() -> None:
    def true(n: int) -> float:
        return n / (1 + (n > 1) * (0.2 + 0.02 * n + 0.001 * n * n))

    points = {n: true(n) for n in (1, 2, 4, 8)}
    fitted = curve(points=points, ages={}, low=1, high=12, model=ThroughputModel())
    assert np.allclose(fitted[:9], [true(n) for n in range(1, 10)], rtol=0.02)
    assert np.isnan(fitted[9:]).all()  # 10.. are more than one step past 8


def test_one_point_gives_a_curve_from_the_prior() -> None:
    fitted = curve(points={4: 400.0}, ages={}, low=1, high=8, model=ThroughputModel())
    assert np.all(np.diff(fitted[:5]) > 0)
    assert np.isnan(fitted[5:]).all()


def test_old_points_weigh_less() -> None:
    model = ThroughputModel(half_life_seconds=60, prior_weight=0)
    points = {1: 100.0, 2: 200.0, 3: 150.0, 4: 400.0}
    fresh = curve(points=points, ages={}, low=1, high=5, model=model)
    stale_three = curve(points=points, ages={3: 6000.0}, low=1, high=5, model=model)
    assert stale_three[4] > fresh[4]  # forgetting the bad point at 3 predicts more at 5


def test_a_snapshot_lists_each_job_once() -> None:
    with pytest.raises(ValueError, match=r"jobs listed twice: ns/a \[type"):
        Snapshot(jobs=[job("a"), job("b"), job("a")])
