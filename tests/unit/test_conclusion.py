"""How a job's round concludes after its write, as tables: its state, record and outcome."""

from datetime import datetime, timedelta

import numpy as np
import pytest

from autoscaler.engine.conclusion import (
    NOT_WRITTEN,
    Decided,
    Written,
    after_write,
    conclude,
    decision_record,
    predicted,
)
from autoscaler.engine.config import SettleConfig
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.settle import Settled
from autoscaler.engine.state import JobState, PricedBatch, Step, StepName
from autoscaler.policies.contract import BatchAtCount
from autoscaler.policies.speedup import JobCurve
from tests.support.clock import NOW
from tests.support.engine_jobs import managed_job

CONFIG = SettleConfig(scale_down_stabilization_seconds=100)
CURVE = JobCurve(low=1, throughput=np.array([10.0, 19.0, 27.0, 34.0, 40.0, 45.0]))
PROPOSAL = Step(name="policy", replicas=6, reason="OptimalAllocation", message="faster")


def job(**changes: object) -> ManagedJob:
    return managed_job(**{"max_replicas": 6, **changes})


HELD_BACK = job(replicas=2, active=0, suspended=True, held_since=NOW - timedelta(hours=1))
STATE = JobState(replicas=4, rescales=1, recommendations=[(NOW - timedelta(seconds=200), 3)])


def decided(the_job: ManagedJob, *steps: Step, priced: PricedBatch | None = None) -> Decided:
    return Decided(
        job=the_job,
        state=STATE,
        settled=Settled(replicas=steps[-1].replicas, steps=(PROPOSAL, *steps)),
        proposal=PROPOSAL,
        reading=30.0,
        curve=CURVE,
        priced=priced,
    )


SUSPEND = Step(name="suspend", replicas=0, reason="Preempted", message="m")
STARVED = Step(name=StepName.STARVATION, replicas=1, reason="Starving", message="m")
CLAMP = Step(name="clamp", replicas=5, reason="Max", message="m")


@pytest.mark.parametrize(
    ("the_round", "write", "replicas", "rescales", "suspensions", "forced"),
    [
        (decided(job(), CLAMP), NOT_WRITTEN, 4, 1, 0, None),
        (decided(job(), CLAMP), Written(error="409"), 4, 1, 0, None),
        (decided(job(), CLAMP), Written(written=True), 5, 2, 0, None),
        (decided(job(), SUSPEND), Written(written=True), 4, 2, 1, None),  # its count kept
        (decided(HELD_BACK, STARVED), Written(written=True), 1, 2, 0, NOW),
        (decided(HELD_BACK, CLAMP), Written(written=True), 5, 2, 0, None),
    ],
)  # fmt: skip
def test_the_state_after_the_write(
    *,
    the_round: Decided,
    write: Written,
    replicas: int,
    rescales: int,
    suspensions: int,
    forced: datetime | None,
) -> None:
    state = after_write(the_round, write, now=NOW)
    assert (state.replicas, state.rescales, state.suspensions) == (replicas, rescales, suspensions)
    assert state.forced_resume == forced
    assert state.last_rescale == (NOW if write.written else None)


PRICED = PricedBatch(
    noise_scale=1.0,
    base_batch=32,
    replicas=5,
    batch=BatchAtCount(
        global_batch=40, local_batch=8, accum_steps=1, samples_per_second=33.0, efficiency=0.9
    ),
)


@pytest.mark.parametrize(
    ("the_round", "expected"),
    [
        (decided(job(), CLAMP), 40.0),  # the curve at the settled count
        (decided(job(), CLAMP, priced=PRICED), 33.0),  # the priced batch's samples/s
        (decided(job(), SUSPEND), None),  # held back: trains at nothing
        (decided(job(), Step(name="clamp", replicas=9, reason="Max", message="m")), float("nan")),
    ],
)
def test_the_prediction(the_round: Decided, expected: float | None) -> None:
    found = predicted(the_round)
    if expected is not None and np.isnan(expected):  # a count off its curve
        assert found is not None
        assert np.isnan(found)
    else:
        assert found == expected


def test_a_concluded_round_records_its_decision_and_keeps_recent_recommendations() -> None:
    the_round = decided(job(), CLAMP, priced=PRICED)
    write = Written(written=True)
    record = decision_record(the_round, write, policy="p", objective=2.5, now=NOW)
    assert (record.proposed, record.replicas, record.reason, record.written) == (6, 5, "Max", True)
    acted = conclude(the_round, write, record, now=NOW, config=CONFIG)
    assert acted.state.last_decision == record
    assert acted.state.recommendations == [(NOW, 6)]  # the 200 s old one left the window
    assert acted.state.goodput == PRICED
    outcome = acted.outcome
    assert (outcome.written, outcome.observed, outcome.predicted) == (True, 30.0, 33.0)
    assert outcome.current == 5
