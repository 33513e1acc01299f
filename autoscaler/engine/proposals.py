"""What the policy proposed for each job, as the first step of its settle (pure): the policy's
count, or the job's current count when the policy failed or did not decide it.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.engine.policy_runner import RunResult
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.settle import current
from autoscaler.engine.state import Step, StepName


@dataclass(frozen=True)
class Proposals:
    """Each job's proposal, how long the policy took, and the fallback if it failed."""

    steps: dict[JobKey, Step]
    seconds: float
    fallback: str = ""


def proposals(result: RunResult, jobs: Sequence[ManagedJob], *, seconds: float) -> Proposals:
    """Every job's proposal from the policy's `result` (taking `seconds`)."""
    by_key = {decision.key: decision for decision in result.decisions}
    steps = {}
    for job in jobs:
        decision = by_key.get(job.key)
        if result.fallback or decision is None:
            steps[job.key] = kept(job, fallback=result.fallback)
        else:
            steps[job.key] = Step(
                name=StepName.POLICY,
                replicas=decision.replicas,
                reason=decision.reason,
                message=decision.message,
            )
    return Proposals(steps=steps, seconds=seconds, fallback=result.fallback)


def kept(job: ManagedJob, *, fallback: str) -> Step:
    """The job kept at its count: the policy's `fallback`, or it returned no count for it."""
    reason = fallback or "NotDecided"
    why = fallback or "the policy returned no count for the job"
    return Step(
        name=StepName.POLICY,
        replicas=current(job),
        reason=reason,
        message=f"kept at {current(job)}: {why}",
    )
