"""`tiresias`: two queues by attained GPU-hours, FIFO within each, gangs at the requested size."""

from autoscaler.policies.contract import JobSnapshot, Snapshot
from autoscaler.policies.tiresias import Tiresias, TiresiasConfig
from tests.support.clock import NOW

GPU = "nvidia.com/gpu"


def _job(name: str, *, asked: int, age: float, attained_hours: float) -> JobSnapshot:
    return JobSnapshot(
        namespace="ns", name=name, min_replicas=1, max_replicas=16, replicas=asked,
        requested_replicas=asked, resources_per_replica={GPU: 1.0}, age_seconds=age,
        attained_seconds=attained_hours * 3600, preemptible=True,
    )  # fmt: skip


def _counts(jobs: list[JobSnapshot], gpus: float) -> dict[str, int]:
    snapshot = Snapshot(capacity={GPU: gpus}, jobs=jobs)
    return {d.name: d.replicas for d in Tiresias(TiresiasConfig()).decide(snapshot, now=NOW)}


def test_the_high_queue_goes_first_then_first_come_first_served() -> None:
    jobs = [
        _job("old-heavy", asked=4, age=900, attained_hours=20),  # low queue, oldest
        _job("young-light", asked=4, age=100, attained_hours=1),
        _job("old-light", asked=4, age=500, attained_hours=15.9),
    ]
    assert _counts(jobs, 8) == {"old-light": 4, "young-light": 4, "old-heavy": 0}


def test_a_gang_that_does_not_fit_waits_and_a_smaller_one_behind_it_runs() -> None:
    jobs = [
        _job("first", asked=6, age=900, attained_hours=0),
        _job("big", asked=4, age=800, attained_hours=0),
        _job("small", asked=2, age=700, attained_hours=0),
    ]
    assert _counts(jobs, 8) == {"first": 6, "big": 0, "small": 2}


def test_a_job_that_cannot_be_held_back_keeps_its_smallest() -> None:
    pinned = _job("pinned", asked=4, age=10, attained_hours=30).model_copy(
        update={"preemptible": False}
    )
    jobs = [_job("first", asked=8, age=900, attained_hours=0), pinned]
    assert _counts(jobs, 8) == {"first": 0, "pinned": 4}
