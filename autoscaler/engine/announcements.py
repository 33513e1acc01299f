"""Which Events a round sends about a job, and why (pure): news only, never one per job per
round. A write is announced (`Rescaled`, `HeldBack`, `Resumed`), a failed write warns
(`ScaleFailed`), a job held for a reason it was not held for last round names it, and invalid
annotations warn once per change. The engine sends what these functions return.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.engine.policy_runner import is_policy_fallback
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.settle import METRICS_UNAVAILABLE, RESCALE_COOLDOWN, Settled, forced
from autoscaler.engine.state import DecisionRecord, Step, StepName

# Hold reasons a user already learns from another Event: a cooldown follows every rescale, which
# the `Rescaled` Event announces (upstream's HPA, too, sends an Event per rescale, none per
# cooldown round).
FOLLOWS_A_RESCALE = frozenset({RESCALE_COOLDOWN})


@dataclass(frozen=True)
class Announcement:
    """An Event about a job; `queueing`: the (action, reason) a hold-back or resume counts."""

    reason: str
    message: str
    warning: bool = False
    queueing: tuple[str, str] | None = None


def announcement(
    job: ManagedJob,
    record: DecisionRecord,
    settled: Settled,
    *,
    previous: DecisionRecord | None,
    error: str,
) -> Announcement | None:
    """An Event on a write, on a failed write, and when a job becomes held for a reason it
    was not held for last round (never one per job per round: a large cluster got an Event per
    job every round when every reason change was announced)."""
    if error:
        message = f"writing {record.replicas} workers failed: {error}"
        return Announcement(reason="ScaleFailed", message=message, warning=True)
    if record.written and (record.replicas == 0 or job.held_back):
        return queueing(job, record, settled)
    if record.written:
        message = f"{job.replicas} -> {record.replicas} workers ({record.reason}): {record.message}"
        return Announcement(reason="Rescaled", message=message)
    return new_hold(record, settled, previous=previous)


def queueing(job: ManagedJob, record: DecisionRecord, settled: Settled) -> Announcement:
    """A held back or resumed job: an Event saying why, and the queueing it counts."""
    first = settled.steps[0]
    if record.replicas == 0:
        message = f"{job.replicas} -> 0 workers, suspended ({first.reason}): {first.message}"
        return Announcement(
            reason="HeldBack", message=message, queueing=("suspended", first.reason)
        )
    last = settled.steps[-1]
    reason = last.reason if forced(settled) else first.reason
    message = f"0 -> {record.replicas} workers, resumed ({reason}): {last.message}"
    return Announcement(reason="Resumed", message=message, queueing=("resumed", reason))


def new_hold(
    record: DecisionRecord, settled: Settled, *, previous: DecisionRecord | None
) -> Announcement | None:
    """A count kept for a reason the job was not kept for last round (not a cooldown)."""
    held = held_reason(settled.steps)
    if not held or held in FOLLOWS_A_RESCALE:
        return None
    if previous is not None and previous.reason == record.reason:
        return None
    warning = is_policy_fallback(held) or held == METRICS_UNAVAILABLE
    return Announcement(reason=held, message=record.message, warning=warning)


def held_reason(steps: Sequence[Step]) -> str:
    """Why a decision kept the job's count whatever the policy wished (a hold step, or the
    policy's fallback), else ""."""
    fallback = steps[0].reason if is_policy_fallback(steps[0].reason) else ""
    held = [step.reason for step in steps if step.name == StepName.HOLD]
    return held[-1] if held else fallback


def problems(job: ManagedJob, *, refused: Mapping[JobKey, str]) -> tuple[str, ...]:
    """Why the job's annotations are ignored or refused: its own problems, then its query's."""
    return (*job.problems, *([refused[job.key]] if job.key in refused else []))


def invalid_annotations(
    found: tuple[str, ...], *, announced: tuple[str, ...] | None
) -> Announcement | None:
    """A Warning for a job's annotation problems, unless they are the ones last announced."""
    if not found or announced == found:
        return None
    return Announcement(reason="InvalidAnnotation", message="; ".join(found), warning=True)
