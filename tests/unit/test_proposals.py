"""The policy's result as each job's proposal, as a table: a missing count keeps the job's."""

import pytest

from autoscaler.engine.policy_runner import RunResult
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.proposals import proposals
from autoscaler.engine.state import Step
from autoscaler.policies.contract import Decision
from tests.support.clock import NOW
from tests.support.engine_jobs import managed_job


def job(name: str, **changes: object) -> ManagedJob:
    return managed_job(name=name, **changes)


DECIDED = Decision(namespace="ns", name="a", replicas=6, reason="OptimalAllocation", message="m")


@pytest.mark.parametrize(
    ("result", "a", "b"),
    [
        (RunResult(decisions=(DECIDED,)),
         Step(name="policy", replicas=6, reason="OptimalAllocation", message="m"),
         Step(name="policy", replicas=4, reason="NotDecided",
              message="kept at 4: the policy returned no count for the job")),
        (RunResult(decisions=(DECIDED,), fallback="PolicyTimeout"),
         Step(name="policy", replicas=4, reason="PolicyTimeout", message="kept at 4: PolicyTimeout"),
         Step(name="policy", replicas=4, reason="PolicyTimeout", message="kept at 4: PolicyTimeout")),
    ],
)  # fmt: skip
def test_each_job_is_proposed_the_policys_count_or_kept(
    result: RunResult, a: Step, b: Step
) -> None:
    found = proposals(result, [job("a"), job("b")], seconds=0.5)
    assert found.steps == {("ns", "a"): a, ("ns", "b"): b}
    assert (found.seconds, found.fallback) == (0.5, result.fallback)


def test_a_held_back_job_undecided_is_kept_held_back() -> None:
    held = job("a", suspended=True, held_since=NOW, active=0, replicas=3)
    kept = proposals(RunResult(), [held], seconds=0.0).steps[held.key]
    assert (kept.replicas, kept.message) == (
        0,
        "kept at 0: the policy returned no count for the job",
    )
