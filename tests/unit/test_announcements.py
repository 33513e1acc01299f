"""Which Event a job's round sends, as tables: news only, never one per job per round."""

from datetime import timedelta

import pytest

from autoscaler.engine.announcements import (
    Announcement,
    announcement,
    held_reason,
    invalid_annotations,
    problems,
)
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.settle import Settled
from autoscaler.engine.state import DecisionRecord, Step, StepName
from tests.support.clock import NOW
from tests.support.engine_jobs import managed_job

POLICY = Step(name="policy", replicas=6, reason="OptimalAllocation", message="more is faster")
COOLDOWN = Step(name="hold", replicas=4, reason="RescaleCooldown", message="cooling down")
NO_DATA = Step(name="hold", replicas=4, reason="MetricsUnavailable", message="no reading")
RECOVERING = Step(name="hold", replicas=4, reason="Recovering", message="a worker restarts")
FALLBACK = Step(name="policy", replicas=4, reason="PolicyTimeout", message="kept at 4: late")
SUSPEND = Step(name="suspend", replicas=0, reason="Preempted", message="others need the GPUs")
RESUME = Step(name="policy", replicas=2, reason="Resumable", message="room again")
STARVED = Step(name=StepName.STARVATION, replicas=1, reason="Starving", message="held too long")


job = managed_job


HELD_BACK = job(replicas=2, active=0, suspended=True, held_since=NOW - timedelta(hours=1))


def record(settled: Settled, *, written: bool) -> DecisionRecord:
    return DecisionRecord(
        time=NOW,
        policy="p",
        proposed=settled.steps[0].replicas,
        replicas=settled.replicas,
        reason=settled.reason,
        message=settled.steps[-1].message,
        steps=list(settled.steps),
        written=written,
    )


def settled(*steps: Step) -> Settled:
    return Settled(replicas=steps[-1].replicas, steps=steps)


@pytest.mark.parametrize(
    ("the_job", "decision", "written", "error", "previous_reason", "expected"),
    [
        (job(), settled(POLICY), False, "boom", None,
         Announcement("ScaleFailed", "writing 6 workers failed: boom", warning=True)),
        (job(), settled(POLICY), True, "", None,
         Announcement("Rescaled", "4 -> 6 workers (OptimalAllocation): more is faster")),
        (job(), settled(POLICY, SUSPEND), True, "", None,
         Announcement("HeldBack", "4 -> 0 workers, suspended (OptimalAllocation): more is faster",
                      queueing=("suspended", "OptimalAllocation"))),
        (HELD_BACK, settled(RESUME), True, "", None,
         Announcement("Resumed", "0 -> 2 workers, resumed (Resumable): room again",
                      queueing=("resumed", "Resumable"))),
        (HELD_BACK, settled(RESUME, STARVED), True, "", None,
         Announcement("Resumed", "0 -> 1 workers, resumed (Starving): held too long",
                      queueing=("resumed", "Starving"))),
        (job(), settled(POLICY, NO_DATA), False, "", None,
         Announcement("MetricsUnavailable", "no reading", warning=True)),
        (job(), settled(POLICY, RECOVERING), False, "", "OptimalAllocation",
         Announcement("Recovering", "a worker restarts")),
        (job(), settled(FALLBACK), False, "", None,
         Announcement("PolicyTimeout", "kept at 4: late", warning=True)),
        (job(), settled(POLICY, RECOVERING), False, "", "Recovering", None),  # not news
        (job(), settled(POLICY, COOLDOWN), False, "", None, None),  # `Rescaled` said it
        (job(), settled(POLICY), False, "", None, None),  # kept, and nothing holds it
    ],
)  # fmt: skip
def test_a_round_announces_only_news(
    *,
    the_job: ManagedJob,
    decision: Settled,
    written: bool,
    error: str,
    previous_reason: str | None,
    expected: Announcement | None,
) -> None:
    previous = None
    if previous_reason is not None:
        previous = record(settled(Step(name="hold", replicas=4, reason=previous_reason,
                                       message="m")), written=False)  # fmt: skip
    found = announcement(
        the_job, record(decision, written=written), decision, previous=previous, error=error
    )
    assert found == expected


@pytest.mark.parametrize(
    ("steps", "reason"),
    [
        ((POLICY,), ""),
        ((POLICY, NO_DATA), "MetricsUnavailable"),
        ((POLICY, NO_DATA, RECOVERING), "Recovering"),  # the last hold
        ((FALLBACK,), "PolicyTimeout"),
        ((FALLBACK, COOLDOWN), "RescaleCooldown"),  # a hold over the fallback
    ],
)
def test_the_held_reason_is_the_last_hold_else_the_policys_fallback(
    steps: tuple[Step, ...], reason: str
) -> None:
    assert held_reason(steps) == reason


@pytest.mark.parametrize(
    ("found", "announced", "warns"),
    [
        ((), None, False),
        (("bad min",), None, True),
        (("bad min",), ("bad min",), False),  # once per change
        (("bad min", "refused"), ("bad min",), True),
        ((), ("bad min",), False),  # fixed: nothing to say
    ],
)
def test_invalid_annotations_warn_once_per_change(
    found: tuple[str, ...], announced: tuple[str, ...] | None, warns: bool
) -> None:
    news = invalid_annotations(found, announced=announced)
    expected = Announcement("InvalidAnnotation", "; ".join(found), warning=True)
    assert news == (expected if warns else None)


def test_a_refused_query_is_one_of_the_jobs_problems() -> None:
    the_job = job(problems=("bad min",))
    assert problems(the_job, refused={the_job.key: "refused"}) == ("bad min", "refused")
    assert problems(the_job, refused={}) == ("bad min",)
