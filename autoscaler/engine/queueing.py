"""Queueing: which jobs the engine holds back (suspends) and resumes, as pure steps.

A job whose `preemptible` annotation is "true" may be given 0 workers by the policy: the engine
then suspends it (`spec.runPolicy.suspend`, with its marker annotation, in one write) and resumes
it, at the count the policy gives it, when one comes. Every other job's 0 is its minimum. The
engine, not the policy, bounds how long a job waits: held back `max_held_seconds`, it is resumed
at least at its minimum whatever the policy says, and is not held back again for as long.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.engine.config import SettleConfig
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.settle import RESCALE_COOLDOWN, Settled
from autoscaler.engine.state import JobState, Step, StepName
from autoscaler.policies.contract import Snapshot


def held_seconds(job: ManagedJob, *, now: datetime) -> float | None:
    """How long the engine has held the job back; None when it does not."""
    if not job.held_back or job.held_since is None:
        return None
    return max(0.0, (now - job.held_since).total_seconds())


def starving(job: ManagedJob, *, now: datetime, config: SettleConfig) -> bool:
    """Held back for the bound or longer: the job must run this round."""
    held = held_seconds(job, now=now)
    return held is not None and held >= config.max_held_seconds


def may_hold(job: ManagedJob, state: JobState, *, now: datetime, config: SettleConfig) -> bool:
    """Whether the policy may give the job 0 this round: it allows it, the starvation bound
    neither forces it to run nor resumed it within the last `max_held_seconds`, and the engine
    did not resume it within the last `min_run_seconds`."""
    if not job.preemptible or starving(job, now=now, config=config):
        return False
    return _protection(state, now=now, config=config) is None


def _protection(state: JobState, *, now: datetime, config: SettleConfig) -> str | None:
    """Why a resumed job may not be held back again yet, if it may not."""
    forced, resumed = state.forced_resume, state.resumed_at
    if forced is not None and now - forced < timedelta(seconds=config.max_held_seconds):
        return f"the starvation bound resumed it less than {config.max_held_seconds:g} s ago"
    if resumed is not None and now - resumed < timedelta(seconds=config.min_run_seconds):
        return f"it was resumed less than {config.min_run_seconds:g} s ago (settle.min_run_seconds)"
    return None


def waiting_hold(
    job: ManagedJob, state: JobState, *, now: datetime, config: SettleConfig
) -> Step | None:
    """Why a held-back job stays held back whatever the policy wishes: within the cooldown of
    its suspension (a resume is a rescale too). None once it may be resumed, and always once the
    bound is due."""
    if starving(job, now=now, config=config):
        return None
    since = max(t for t in (state.last_rescale, job.held_since) if t is not None)
    if now - since < timedelta(seconds=config.cooldown_seconds):
        message = f"held back less than {config.cooldown_seconds:g} s ago"
        return Step(name=StepName.HOLD, replicas=0, reason=RESCALE_COOLDOWN, message=message)
    return None


def queue_view(
    view: Snapshot,
    jobs: Mapping[JobKey, ManagedJob],
    states: Mapping[JobKey, JobState],
    holds: Mapping[JobKey, Step | None],
    *,
    now: datetime,
    config: SettleConfig,
) -> Snapshot:
    """The snapshot with what queueing shows a policy: which jobs it may give 0 (`preemptible`),
    which wait (`suspended`, `held_seconds`). A held-back job that must stay so this round is
    left out (a count of 0 has no bounds to pin it with), and so is no job that must run."""
    shown = []
    for entry in view.jobs:
        job = jobs[entry.key]
        held = holds.get(entry.key) is not None
        if job.held_back and held:
            continue
        update = {
            "preemptible": not held and may_hold(job, states[entry.key], now=now, config=config),
            "suspended": job.held_back,
            "held_seconds": held_seconds(job, now=now),
        }
        shown.append(entry.model_copy(update=update))
    return view.model_copy(update={"jobs": shown})


@dataclass(frozen=True)
class Queued:
    """What queueing made of a proposal: `settled` when it decided the job's count itself
    (suspend, stay held back, resume), else `proposal`, to go through the steps after queueing
    (`pipeline.settle_round`)."""

    proposal: Step
    settled: Settled | None = None
    prefix: tuple[Step, ...] = ()  # steps before `proposal` (the policy's own 0)


def queue(
    job: ManagedJob,
    state: JobState,
    *,
    proposal: Step,
    held: Step | None,
    now: datetime,
    config: SettleConfig,
) -> Queued:
    """The proposal for a job through queueing (pure). A running job: a 0 suspends it if it
    may be held back and is not held, else becomes its minimum (`refused_hold`). A held-back job: it
    stays held while held or given 0, is resumed at the count given (within its bounds and
    allowed counts), and at least at its minimum once held back `max_held_seconds`."""
    if not job.held_back:
        return _running(job, state, proposal=proposal, held=held, now=now, config=config)
    return _waiting(job, proposal=proposal, held=held, now=now, config=config)


def refused_hold(settled: Settled, state: JobState) -> Step | None:
    """The step that kept a policy's 0 at the job's minimum, when its last decision had no such
    step (news worth a log line, not one every round)."""
    step = next((one for one in settled.steps if one.name == StepName.QUEUE), None)
    last = state.last_decision
    if step is None or (last is not None and step in last.steps):
        return None
    return step


def _running(
    job: ManagedJob,
    state: JobState,
    *,
    proposal: Step,
    held: Step | None,
    now: datetime,
    config: SettleConfig,
) -> Queued:
    if proposal.replicas > 0:
        return Queued(proposal=proposal)
    if held is None and may_hold(job, state, now=now, config=config):
        step = Step(
            name=StepName.SUSPEND,
            replicas=0,
            reason="HeldBack",
            message=f"held back (suspended) on the policy's 0: {proposal.message}",
        )
        return Queued(proposal=proposal, settled=Settled(replicas=0, steps=(proposal, step)))
    why = "the job is not preemptible" if not job.preemptible else _protected(state, now, config)
    minimum = Step(
        name=StepName.QUEUE,
        replicas=job.min_replicas,
        reason="NotPreemptible" if not job.preemptible else "HoldBackRefused",
        message=f"the policy gave 0 but {why}: kept at least at its minimum",
    )
    return Queued(proposal=minimum, prefix=(proposal,))


def _waiting(
    job: ManagedJob, *, proposal: Step, held: Step | None, now: datetime, config: SettleConfig
) -> Queued:
    if starving(job, now=now, config=config):
        count = resume_count(job, max(proposal.replicas, job.min_replicas))
        held_for = held_seconds(job, now=now) or 0.0
        step = Step(
            name=StepName.STARVATION,
            replicas=count,
            reason="HeldTooLong",
            message=f"held back {held_for:.0f} s, the bound is {config.max_held_seconds:g} s"
            f" (settle.max_held_seconds): resumed at {count} workers whatever the policy wished",
        )
        return Queued(proposal=proposal, settled=Settled(replicas=count, steps=(proposal, step)))
    if held is not None:
        return Queued(proposal=proposal, settled=Settled(replicas=0, steps=(proposal, held)))
    if proposal.replicas <= 0:
        return Queued(proposal=proposal, settled=Settled(replicas=0, steps=(proposal,)))
    count = resume_count(job, proposal.replicas)
    step = Step(
        name=StepName.RESUME,
        replicas=count,
        reason=proposal.reason,
        message=f"resumed at {count} workers: {proposal.message}",
    )
    return Queued(proposal=proposal, settled=Settled(replicas=count, steps=(proposal, step)))


def resume_count(job: ManagedJob, wish: int) -> int:
    """The count a resume writes: the wish within the job's bounds, then the largest allowed
    count not above it (the smallest allowed one if none is)."""
    count = min(max(wish, job.min_replicas), job.max_replicas)
    allowed = job.allowed_replicas
    if allowed is None or count in allowed:
        return count
    below = [n for n in allowed if n <= count]
    return max(below) if below else min(allowed)


def _protected(state: JobState, now: datetime, config: SettleConfig) -> str:
    return _protection(state, now=now, config=config) or "it is held by another rule this round"


def suspended(state: JobState, *, now: datetime) -> JobState:
    """The state after the engine held the job back: a restart like a rescale (its cooldown
    starts, the rescale is counted); the count it ran at is kept for its resume."""
    return state.model_copy(
        update={
            "last_rescale": now,
            "rescales": state.rescales + 1,
            "suspensions": state.suspensions + 1,
        }
    )


def resumed(state: JobState, *, to: int, now: datetime, forced: bool) -> JobState:
    """The state after the engine resumed the job at `to`: a restart like a rescale. Every
    worker is a new pod, with torchrun's whole restart budget again."""
    update: dict[str, object] = {
        "last_rescale": now,
        "rescales": state.rescales + 1,
        "restarts_spent": 0,
        "replicas": to,
        "resumed_at": now,
    }
    if forced:
        update["forced_resume"] = now
    return state.model_copy(update=update)
