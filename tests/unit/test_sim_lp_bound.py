"""The time-indexed LP bound: by hand, below every policy, and finer slots never lower it."""

import itertools

import pytest

from autoscaler.sim import DEFAULT_POLICIES, SimConfig, compare
from autoscaler.sim.bundled import bundled_profiles, bundled_workload
from autoscaler.sim.lp_bound import default_slot_seconds, hull, lp_bound
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.workload import WorkloadJob

LINEAR = {"linear": Profile("linear", (1, 2, 4, 8), (ProfileRow(10, (1.0, 2.0, 4.0, 8.0)),))}
TWO = [WorkloadJob(name, 0.0, "linear", 10, 800, 1, 8, 1) for name in ("a", "b")]
# Halving the slot may lower the optimum by this much, relatively (the solver's tolerance).
FINER_SLOT_TOLERANCE = 1e-6


@pytest.mark.parametrize(
    ("points", "vertices"),
    [
        ([(1.0, 1.0), (2.0, 2.0), (4.0, 4.0)], ((0.0, 0.0), (4.0, 4.0))),  # collinear: one segment
        ([(1.0, 1.0), (2.0, 1.8), (4.0, 3.2), (8.0, 5.0)],
         ((0.0, 0.0), (1.0, 1.0), (2.0, 1.8), (4.0, 3.2), (8.0, 5.0))),
        ([(1.0, 1.0), (2.0, 1.2), (4.0, 3.0), (8.0, 2.0)], ((0.0, 0.0), (1.0, 1.0), (4.0, 3.0))),
    ],
)  # fmt: skip
def test_the_hull_is_concave_through_the_origin_up_to_the_peak(
    points: list[tuple[float, float]], vertices: tuple[tuple[float, float], ...]
) -> None:
    assert hull(points) == vertices


@pytest.mark.parametrize(
    ("slot", "mean"),
    [
        # Two jobs of 800 GPU-seconds on 8 GPUs: the optimum is 150 s (100 and 200); the LP
        # counts each slot's work from its start, 150 - slot/2, never below 100 s alone.
        (100.0, 100.0),
        (50.0, 125.0),
        (25.0, 137.5),
    ],
)
def test_two_jobs_by_hand(slot: float, mean: float) -> None:
    bound = lp_bound(TWO, LINEAR, total_gpus=8, slot_seconds=slot)
    assert bound.mean_jct == pytest.approx(mean, rel=1e-6)
    assert bound.slot_seconds == slot


def test_a_job_alone_is_bounded_by_its_time_alone() -> None:
    bound = lp_bound(TWO[:1], LINEAR, total_gpus=8, slot_seconds=30.0)
    assert bound.mean_jct == pytest.approx(100.0)


def test_the_bound_never_exceeds_any_policys_mean_jct() -> None:
    jobs = [WorkloadJob(f"j{i}", 40.0 * i, "linear", 10, 400 * (i + 1), 1, 8, 1) for i in range(5)]
    comparison = compare(workload=jobs, profiles=LINEAR, config=SimConfig(gpus=8, gpus_per_node=4))
    assert comparison.lp_bound.mean_jct is not None
    for name in DEFAULT_POLICIES:
        mean = comparison.runs[name].result.mean_jct
        assert mean is not None
        assert comparison.lp_bound.mean_jct <= mean, name


def test_finer_slots_never_lower_the_bundled_bound() -> None:
    profiles = bundled_profiles()
    jobs = bundled_workload(profiles)
    slot = default_slot_seconds(jobs, profiles, total_gpus=64)
    means = [
        lp_bound(jobs, profiles, total_gpus=64, slot_seconds=slot * factor).mean_jct or 0.0
        for factor in (4, 2, 1)
    ]
    assert means[0] > 0
    for coarser, finer in itertools.pairwise(means):
        assert finer >= coarser * (1 - FINER_SLOT_TOLERANCE)
