"""How a job's round concludes once its count is written or kept (pure): its state after the
write, the decision it records, and its outcome for the round's report.

`Decided` is what the round knows of a job before the write, `Written` what the write did; the
engine writes, sends the Events `announcements` returns, and keeps the `Acted` state.
"""

from dataclasses import dataclass
from datetime import datetime

from autoscaler.engine.config import SettleConfig
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.queueing import resumed, suspended
from autoscaler.engine.report import Outcome
from autoscaler.engine.settle import Settled, forced, recommendations, rescaled
from autoscaler.engine.state import DecisionRecord, JobState, PricedBatch, Step
from autoscaler.policies.speedup import JobCurve


@dataclass(frozen=True)
class Decided:
    """A job's round before its write: its state, what was read and proposed, how it settled,
    its fitted curve, and (a goodput job) its pricing at the settled count."""

    job: ManagedJob
    state: JobState
    settled: Settled
    proposal: Step
    reading: float | None
    curve: JobCurve
    priced: PricedBatch | None = None


@dataclass(frozen=True)
class Written:
    """What the round's write of the count did: `written`, or failed with `error`, or neither."""

    written: bool = False
    error: str = ""


NOT_WRITTEN = Written()  # a job whose count the round keeps


@dataclass(frozen=True)
class Acted:
    """A job's round concluded: its outcome and its new state."""

    outcome: Outcome
    state: JobState


def decision_record(
    decided: Decided, write: Written, *, policy: str, objective: float, now: datetime
) -> DecisionRecord:
    """The decision the job's state records (and `explain` shows) for this round."""
    settled = decided.settled
    return DecisionRecord(
        time=now,
        policy=policy,
        proposed=decided.proposal.replicas,
        replicas=settled.replicas,
        reason=settled.reason,
        message=settled.steps[-1].message,
        steps=list(settled.steps),
        written=write.written,
        objective=objective,
    )


def conclude(
    decided: Decided,
    write: Written,
    record: DecisionRecord,
    *,
    now: datetime,
    config: SettleConfig,
) -> Acted:
    """The job's outcome and its state after the write, with `record` as its latest decision."""
    state = after_write(decided, write, now=now)
    if decided.priced is not None:
        state = state.model_copy(update={"goodput": decided.priced})
    outcome = Outcome(
        job=decided.job,
        settled=decided.settled,
        written=write.written,
        error=write.error,
        observed=decided.reading,
        predicted=predicted(decided),
        goodput=decided.priced,
    )
    # Held rounds' recommendations count too: they keep a fresh rescale from being undone
    # before the window passes (bench-sim measures slower jobs and more rescales without them).
    kept = recommendations(state, recommendation=decided.proposal.replicas, now=now, config=config)
    return Acted(outcome=outcome, state=state.with_decision(record, recommendations=kept))


def after_write(decided: Decided, write: Written, *, now: datetime) -> JobState:
    """The job's state once its count is written: suspended, resumed or rescaled; else as it was."""
    state, settled = decided.state, decided.settled
    if not write.written:
        return state
    if settled.replicas == 0:
        return suspended(state, now=now)
    if decided.job.held_back:
        return resumed(state, to=settled.replicas, now=now, forced=forced(settled))
    return rescaled(state, to=settled.replicas, now=now)


def predicted(decided: Decided) -> float | None:
    """The samples/s the settled count should read: a goodput job's at the batch it is priced
    at, else its curve's; none for a held-back job (not the NaN of a count off its curve)."""
    if decided.priced is not None:
        return decided.priced.batch.samples_per_second
    count, curve = decided.settled.replicas, decided.curve
    return curve.at(count) if curve.known and count else None
