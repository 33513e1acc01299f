"""The settle pipeline's order as tables: one round's proposals through `settle_round`, each
job's settled count and the steps that made it, in the order they applied."""

import re
from datetime import timedelta

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.engine.config import SettleConfig
from autoscaler.engine.pipeline import settle_round
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.queueing import refused_hold
from autoscaler.engine.settle import RESCALE_COOLDOWN, Settled
from autoscaler.engine.state import DecisionRecord, JobState, Step, StepName
from tests.support.clock import NOW

GPU = "nvidia.com/gpu"
CONFIG = SettleConfig(
    cooldown_seconds=120,
    scale_down_stabilization_seconds=100,
    scale_up_max_pods=2,
    scale_up_max_percent=50,
    scale_down_max_percent=50,
    min_run_seconds=600,
    max_held_seconds=3600,
)
P, Q, H = StepName.POLICY, StepName.QUEUE, StepName.HOLD
SUSPEND, RESUME, STARVATION = StepName.SUSPEND, StepName.RESUME, StepName.STARVATION
CLAMP, STABILISE, RATE, ALLOWED = (
    StepName.CLAMP,
    StepName.STABILISE,
    StepName.RATE_LIMIT,
    StepName.ALLOWED,
)
PENDING, LIMIT, CAPACITY = StepName.PENDING, StepName.LIMIT, StepName.CAPACITY


def job(name: str, **changes: object) -> ManagedJob:
    fields: dict[str, object] = {
        "namespace": "ns",
        "name": name,
        "min_replicas": 2,
        "max_replicas": 8,
        "replicas": 4,
        "active": changes.get("replicas", 4),
        "owner": Owner.ENGINE,
        "created": NOW - timedelta(hours=3),
        "resources_per_replica": {GPU: 1.0},
    }
    return ManagedJob(**{**fields, **changes})  # type: ignore[arg-type]


def waiting(name: str, seconds: float) -> ManagedJob:
    """A preemptible job the engine held back `seconds` ago."""
    since = NOW - timedelta(seconds=seconds)
    return job(name, preemptible=True, suspended=True, held_since=since, active=0)


def wish(replicas: int) -> Step:
    return Step(name=StepName.POLICY, replicas=replicas, reason="OptimalAllocation", message="m")


HOLD = Step(name=StepName.HOLD, replicas=4, reason=RESCALE_COOLDOWN, message="cooling down")
RECENT_3 = JobState(recommendations=[(NOW - timedelta(seconds=30), 3)])

Expected = dict[str, tuple[int, list[StepName]]]


@pytest.mark.parametrize(
    ("case", "jobs", "wishes", "held", "states", "gpus", "limit", "expected"),
    [
        ("a job's own steps in order: clamp, then the rate limit, then an allowed count",
         [job("a", max_replicas=10, allowed_replicas=(2, 4, 5, 8, 10))], {"a": 20}, set(), {},
         64, None, {"a": (5, [P, CLAMP, RATE, ALLOWED])}),
        ("stabilise: a scale-down no lower than the window's highest recommendation",
         [job("a")], {"a": 2}, set(), {"a": RECENT_3}, 64, None, {"a": (3, [P, STABILISE])}),
        ("pending: no scale-up while pods wait", [job("a", active=3)], {"a": 6}, set(), {}, 64,
         None, {"a": (4, [P, PENDING])}),
        ("a held job keeps its count: none of its own steps", [job("a")], {"a": 20}, {"a"}, {},
         64, None, {"a": (4, [P, H])}),
        ("queue before hold: a non-preemptible 0 is its minimum, then held", [job("a")],
         {"a": 0}, {"a"}, {}, 64, None, {"a": (4, [P, Q, H])}),
        ("queue before the job's own steps: a 0 is its minimum, then rate-limited",
         [job("a", replicas=8)], {"a": 0}, set(), {}, 64, None, {"a": (4, [P, Q, RATE])}),
        ("a preemptible job's 0 suspends it, past the job's own steps",
         [job("a", preemptible=True)], {"a": 0}, set(), {}, 64, None, {"a": (0, [P, SUSPEND])}),
        ("a held-back job resumes within its bounds, past the rate limit",
         [waiting("w", 600)], {"w": 20}, set(), {}, 64, None, {"w": (8, [P, RESUME])}),
        ("a starving job is resumed even while held", [waiting("w", 3601)], {"w": 0}, {"w"}, {},
         64, None, {"w": (2, [P, STARVATION])}),
        ("scale-downs before scale-ups at the rescale limit, the older scale-up waits",
         [job("down", created=NOW), job("up")], {"down": 2, "up": 6}, set(), {}, 64, 1,
         {"down": (2, [P]), "up": (4, [P, LIMIT])}),
        ("a forced resume takes the limit's place first, before any scale-down",
         [waiting("bound", 3600), job("down"), job("up")], {"bound": 0, "down": 2, "up": 6},
         set(), {}, 64, 1,
         {"bound": (2, [P, STARVATION]), "down": (4, [P, LIMIT]), "up": (4, [P, LIMIT])}),
        ("more forced resumes than the limit: all go, nothing else",
         [waiting("b1", 3600), waiting("b2", 4000), job("down")], {"b1": 0, "b2": 0, "down": 2},
         set(), {}, 64, 1,
         {"b1": (2, [P, STARVATION]), "b2": (2, [P, STARVATION]), "down": (4, [P, LIMIT])}),
        ("capacity fits a forced resume first: the scale-up is undone, the resume never",
         [waiting("bound", 3600), job("up"), job("other")], {"bound": 0, "up": 6, "other": 4},
         set(), {}, 9, None,
         {"bound": (2, [P, STARVATION]), "up": (4, [P, CAPACITY]), "other": (4, [P])}),
        ("capacity undoes a resume the bound does not force", [waiting("w", 600), job("runs")],
         {"w": 4, "runs": 4}, set(), {}, 6, None,
         {"w": (0, [P, RESUME, CAPACITY]), "runs": (4, [P])}),
        ("a rescale the limit deferred is not undone by capacity too",
         [job("down"), job("up", created=NOW - timedelta(hours=5))], {"down": 2, "up": 6}, set(),
         {}, 8, 1, {"down": (2, [P]), "up": (4, [P, LIMIT])}),
        ("the limit before capacity: a scale-up capacity undoes keeps the slot it took",
         [job("big", created=NOW - timedelta(hours=5)), job("small")], {"big": 6, "small": 5},
         set(), {}, 9, 1, {"big": (4, [P, CAPACITY]), "small": (4, [P, LIMIT])}),
    ],
)  # fmt: skip
def test_settle_round(
    *,
    case: str,
    jobs: list[ManagedJob],
    wishes: dict[str, int],
    held: set[str],
    states: dict[str, JobState],
    gpus: float,
    limit: int | None,
    expected: Expected,
) -> None:
    result = settle_round(
        jobs,
        {j.key: states.get(j.name, JobState()) for j in jobs},
        proposals={j.key: wish(wishes[j.name]) for j in jobs},
        holds={j.key: HOLD if j.name in held else None for j in jobs},
        capacity={GPU: gpus},
        now=NOW,
        config=CONFIG.model_copy(update={"max_rescales_per_round": limit}),
    )
    got = {key[1]: (one.replicas, [step.name for step in one.steps]) for key, one in result.items()}
    assert got == expected, case


def test_the_docstring_lists_every_step_once_in_the_order_they_apply() -> None:
    documented = re.findall(r"^\s+\d\. ([a-z-]+):", settle_round.__doc__ or "", re.MULTILINE)
    assert documented == [Q, H, CLAMP, STABILISE, RATE, ALLOWED, PENDING, LIMIT, CAPACITY]


MINIMUM = Step(name=StepName.QUEUE, replicas=2, reason="NotPreemptible", message="kept at 2")


def decided(*steps: Step) -> JobState:
    record = DecisionRecord(time=NOW, policy="p", proposed=0, replicas=2, reason="r", message="")
    return JobState(decisions=[record.model_copy(update={"steps": list(steps)})])


@pytest.mark.parametrize(
    ("steps", "state", "news"),
    [
        ((wish(0), MINIMUM), JobState(), MINIMUM),  # first time: logged
        ((wish(0), MINIMUM), decided(wish(0), MINIMUM), None),  # as last round: not again
        ((wish(0), MINIMUM, HOLD), decided(wish(3)), MINIMUM),  # news even when held after
        ((wish(3),), JobState(), None),  # no 0 refused
    ],
)
def test_a_refused_hold_back_is_news_once(
    steps: tuple[Step, ...], state: JobState, news: Step | None
) -> None:
    assert refused_hold(Settled(replicas=steps[-1].replicas, steps=steps), state) == news
