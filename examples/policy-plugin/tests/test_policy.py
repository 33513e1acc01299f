"""`weighted-fair-share` on table snapshots, loaded the way the engine loads it.

Run with the package installed (`pip install -e .` or `pip install --target`): the tests use the
entry point, so they also prove the packaging.
"""

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from autoscaler_policy_example.policy import EPSILON, PLUGIN

from autoscaler.policies.contract import Decision, JobSnapshot, Snapshot
from autoscaler.policies.registry import PolicyError, build, find

NOW = datetime(2026, 11, 29, tzinfo=UTC)  # any instant: the policy never reads it
GPU = "nvidia.com/gpu"


def job(
    name: str,
    *,
    replicas: int = 1,
    low: int = 1,
    high: int = 8,
    size: float = 1.0,
    weight: float = 1.0,
    resource: str = GPU,
) -> JobSnapshot:
    return JobSnapshot(
        namespace="ns",
        name=name,
        min_replicas=low,
        max_replicas=high,
        replicas=replicas,
        resources_per_replica={resource: size},
        weight=weight,
    )


def decisions(jobs: list[JobSnapshot], capacity: dict[str, float], **config: Any) -> list[Decision]:
    policy = build(PLUGIN, config)
    return list(policy.decide(Snapshot(capacity=capacity, jobs=jobs), now=NOW))


def decide(jobs: list[JobSnapshot], capacity: dict[str, float], **config: Any) -> dict[str, int]:
    return {d.name: d.replicas for d in decisions(jobs, capacity, **config)}


def test_it_is_installed_through_the_entry_point_group() -> None:
    assert find("weighted-fair-share") is PLUGIN


@pytest.mark.parametrize(
    ("jobs", "capacity", "config", "expected"),
    [
        pytest.param([job("a"), job("b")], {GPU: 8}, {}, {"a": 4, "b": 4}, id="equal-weights"),
        pytest.param(
            [job("a", weight=3), job("b")], {GPU: 8}, {}, {"a": 6, "b": 2}, id="weights-3-to-1"
        ),
        pytest.param(
            [job("a", high=2), job("b", high=20), job("c", weight=2, high=20)],
            {GPU: 16},
            {},
            {"a": 2, "b": 5, "c": 9},  # a stops at its max; b and c split the other 14 as 1:2
            id="leftover-of-a-capped-job-goes-to-the-others",
        ),
        pytest.param(
            [job("a", size=4), job("b")],
            {GPU: 10},
            {},
            {"a": 1, "b": 6},  # a's second worker (4 GPUs) never fits: b takes what is left
            id="a-worker-that-does-not-fit-leaves-room-for-smaller-ones",
        ),
        pytest.param(
            [job("a"), job("b")], {GPU: 8}, {"reserve": 2}, {"a": 3, "b": 3}, id="reserve"
        ),
        pytest.param(
            [job("a", replicas=5, low=5, high=5), job("b")],
            {GPU: 8},
            {},
            {"a": 5, "b": 3},  # the engine shows a held job with min = max = its count
            id="a-held-job-keeps-its-count",
        ),
        pytest.param(
            [job("a", high=3), job("b", high=5)], {}, {}, {"a": 3, "b": 5}, id="no-capacity-limit"
        ),
        pytest.param(
            [job(name, size=0.1) for name in "abc"],
            {GPU: 0.9},
            {},
            {"a": 3, "b": 3, "c": 3},  # 9 x 0.1 is 0.9000000000000001
            id="fractional-sizes",
        ),
        pytest.param(
            [job("a", size=2, resource="cpu"), job("b", size=1, resource="cpu")],
            {"cpu": 12, GPU: 0},
            {"resource": "cpu"},
            {"a": 3, "b": 6},  # equal weights: 6 CPUs each
            id="another-resource",
        ),
    ],
)
def test_counts(
    jobs: list[JobSnapshot],
    capacity: dict[str, float],
    config: dict[str, Any],
    expected: dict[str, int],
) -> None:
    assert decide(jobs, capacity, **config) == expected
    assert {d.reason for d in decisions(jobs, capacity, **config)} == {"FairShare"}


def test_when_the_minimums_do_not_fit_every_count_is_kept() -> None:
    result = decisions([job("a", replicas=3, low=3), job("b", replicas=4, low=2)], {GPU: 4})
    assert [(d.replicas, d.reason) for d in result] == [
        (3, "InsufficientCapacity"),
        (4, "InsufficientCapacity"),
    ]
    assert result[0].message == (
        "the minimums need 5 nvidia.com/gpu, only 4 is available: keeping every count"
    )


@pytest.mark.parametrize(("gpus", "a"), [(8, (8, "FairShare")), (0, (1, "InsufficientCapacity"))])
def test_a_job_that_requests_none_of_the_resource_keeps_its_count(
    gpus: float, a: tuple[int, str]
) -> None:
    result = decisions([job("a"), job("b", replicas=3, size=0)], {GPU: gpus})
    assert [(d.name, d.replicas, d.reason) for d in result] == [
        ("a", *a),
        ("b", 3, "ResourceNotRequested"),
    ]


def test_messages_say_what_each_job_holds() -> None:
    result = decisions([job("a", weight=3, high=6), job("b", size=2)], {GPU: 10})
    assert [d.message for d in result] == [
        "6 workers hold 6 of 10 nvidia.com/gpu, for weight 3 of 4: at the job's maximum",
        "2 workers hold 4 of 10 nvidia.com/gpu, for weight 1 of 4",
    ]


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"reserv": 2}, "policy 'weighted-fair-share': reserv: Extra inputs are not permitted"),
        ({"reserve": -1}, "reserve: Input should be greater than or equal to 0"),
    ],
)
def test_a_bad_config_is_refused_with_the_key(config: dict[str, Any], error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        build(PLUGIN, config)


def random_jobs(rng: random.Random) -> list[JobSnapshot]:
    jobs = []
    for index in range(rng.randint(1, 6)):
        low = rng.randint(1, 3)
        jobs.append(
            job(
                f"job-{index}",
                replicas=low,
                low=low,
                high=low + rng.randint(0, 12),
                size=rng.choice([0.5, 1.0, 2.0, 4.0, 8.0]),
                weight=rng.choice([0.5, 1.0, 2.0, 3.0]),
            )
        )
    return jobs


@pytest.mark.parametrize("seed", range(200))
def test_rules_that_hold_for_any_snapshot(seed: int) -> None:
    rng = random.Random(seed)
    jobs = random_jobs(rng)
    capacity = float(sum(j.min_replicas * j.resources_per_replica[GPU] for j in jobs))
    capacity += rng.choice([0.0, 1.0, 7.5, 40.0, 1000.0])
    counts = decide(jobs, {GPU: capacity})
    size = {j.name: j.resources_per_replica[GPU] for j in jobs}
    share = {j.name: size[j.name] / j.weight for j in jobs}  # resource per weight, per worker
    free = capacity - sum(counts[j.name] * size[j.name] for j in jobs)
    assert free >= -EPSILON  # never more than the capacity
    for j in jobs:
        assert j.min_replicas <= counts[j.name] <= j.max_replicas
        if counts[j.name] < j.max_replicas:
            assert size[j.name] > free - EPSILON  # nothing left that this job could use
    # weighted fairness: no job's last worker lifted its share per weight above what one more
    # worker would give a job that could still grow and whose worker is no larger
    for i in (i for i in jobs if counts[i.name] > i.min_replicas):
        last = counts[i.name] * share[i.name]
        for j in jobs:
            if counts[j.name] < j.max_replicas and size[j.name] <= size[i.name]:
                assert last <= (counts[j.name] + 1) * share[j.name] + EPSILON
    shuffled = rng.sample(jobs, len(jobs))
    assert decide(shuffled, {GPU: capacity}) == counts  # the order of the jobs never matters
