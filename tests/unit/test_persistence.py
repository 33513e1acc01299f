"""What of a job's state is persisted, and when, as tables; the store against a recording cluster."""

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.engine.persistence import StateStore, decided_from, due_refreshes, essence
from autoscaler.engine.ports import ManagedJob, ScaleResult
from autoscaler.engine.state import DecisionRecord, JobState, Point, Step
from tests.support.clock import NOW
from tests.support.engine_jobs import managed_job


def job(**changes: object) -> ManagedJob:
    return managed_job(**{"uid": "u1", **changes})


def held_by(reason: str) -> DecisionRecord:
    steps = [Step(name="policy", replicas=4, reason="OptimalAllocation", message="m"),
             Step(name="hold", replicas=4, reason=reason, message="m")]  # fmt: skip
    return DecisionRecord(time=NOW, policy="p", proposed=4, replicas=4, reason=reason,
                          message="m", steps=steps)  # fmt: skip


BASE = JobState(replicas=4, throughput={4: Point(samples_per_second=1.0, observed_at=NOW)})


@pytest.mark.parametrize(
    ("change", "substantive"),
    [
        ({"replicas": 6}, True),
        ({"last_rescale": NOW}, True),
        ({"rescales": 1}, True),
        ({"restarts_spent": 1}, True),
        ({"throughput": {**BASE.throughput, 2: Point(samples_per_second=1, observed_at=NOW)}}, True),
        ({"decisions": [held_by("Recovering")]}, True),
        # What moves every round, and a cooldown (it follows from `last_rescale`):
        ({"throughput": {4: Point(samples_per_second=2.0, observed_at=NOW)}}, False),
        ({"accounted_at": NOW}, False),
        ({"recommendations": [(NOW, 5)]}, False),
        ({"decisions": [held_by("RescaleCooldown")]}, False),
    ],
)  # fmt: skip
def test_the_essence_is_what_a_new_leader_could_not_rebuild(
    change: Mapping[str, object], substantive: bool
) -> None:
    assert (essence(BASE.model_copy(update=change)) != essence(BASE)) is substantive


@pytest.mark.parametrize(
    ("ages", "limit", "due"),
    [
        ((10, 70, 90), 5, ["c", "b"]),  # the oldest first
        ((61, 70, 90), 2, ["c", "b"]),  # at most `limit`
        ((10, 20, 30), 5, []),
        ((60, 0, 0), 5, ["a"]),  # `period` ago counts
    ],
)
def test_unchanged_states_are_refreshed_the_oldest_first_within_a_limit(
    ages: Sequence[int], limit: int, due: list[str]
) -> None:
    unchanged = [(job(name=name), BASE) for name in "abc"]
    saved_at = {(j.namespace, j.name): NOW - timedelta(seconds=age)
                for (j, _), age in zip(unchanged, ages, strict=True)}  # fmt: skip
    found = due_refreshes(
        unchanged, saved_at=saved_at, now=NOW, period=timedelta(seconds=60), limit=limit
    )
    assert [j.name for j, _ in found] == due


@pytest.mark.parametrize(
    ("change", "same"),
    [({}, True), ({"uid": "u2"}, False), ({"owner": Owner.HPA}, False), ({"replicas": 5}, False),
     ({"resource_version": "9"}, True)],
)  # fmt: skip
def test_a_saved_job_is_written_under_only_while_it_is_the_job_decided_from(
    change: Mapping[str, object], same: bool
) -> None:
    assert decided_from(job(), job(**change)) is same


@dataclass
class Recorder:
    """Records the states saved; `failing`: the saves raise."""

    saves: list[tuple[str, str]] = field(default_factory=list)
    failing: bool = False

    def save_state(self, job: ManagedJob, *, state: str) -> ManagedJob | None:
        if self.failing:
            raise RuntimeError("the API server is away")
        self.saves.append((job.name, state))
        return replace(job, resource_version="2")

    def jobs(self) -> Sequence[ManagedJob]:
        return ()

    def capacity(self) -> Mapping[str, float]:
        return {}

    def scale(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        raise AssertionError("the store never writes a count")

    def suspend(self, job: ManagedJob, *, since: datetime) -> ScaleResult:
        raise AssertionError("the store never writes a count")

    def resume(self, job: ManagedJob, *, replicas: int) -> ScaleResult:
        raise AssertionError("the store never writes a count")

    def event(self, job: ManagedJob, *, reason: str, message: str, warning: bool = False) -> None:
        raise AssertionError("the store sends no Event")


def store(cluster: Recorder, writers: ThreadPoolExecutor) -> StateStore:
    return StateStore(
        cluster, writers=writers, refresh_after=timedelta(seconds=60), refreshes_per_round=20
    )


def test_a_state_is_unchanged_once_its_save_is_finished() -> None:
    cluster = Recorder()
    with ThreadPoolExecutor(max_workers=1) as writers:
        states = store(cluster, writers)
        the_job = job(state=BASE.to_json())
        assert states.restore(the_job) == BASE
        assert states.holds_count_of(the_job)  # restored at the job's count
        assert states.changed(the_job.key, BASE)  # never saved by this engine
        states.save_later(the_job, BASE, now=NOW)
        states.finish_saves()
        assert cluster.saves == [("j", BASE.to_json())]
        assert not states.changed(the_job.key, BASE)
        assert states.refreshes([(the_job, BASE)], now=NOW + timedelta(seconds=60))
        states.forget(the_job.key)
        assert states.changed(the_job.key, BASE)


def test_a_failed_save_is_saved_again_and_a_failed_store_ahead_blocks_the_write() -> None:
    cluster = Recorder(failing=True)
    with ThreadPoolExecutor(max_workers=1) as writers:
        states = store(cluster, writers)
        the_job = job()
        states.save_later(the_job, BASE, now=NOW)
        states.finish_saves()
        assert states.changed(the_job.key, BASE)
        assert states.store_ahead(the_job, BASE) is None
        cluster.failing = False
        ahead = states.store_ahead(the_job, BASE)
        assert ahead is not None
        assert ahead.resource_version == "2"  # the job as the save left it
        assert states.holds_count_of(the_job)
