"""What the engine remembers of a job between rounds, persisted as one annotation on the job.

So a new leader resumes where the last one stopped, and `explain` can show it.
"""

import logging
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.policies.contract import BatchAtCount, RunningBatch

log = logging.getLogger(__name__)
HISTORY = 5  # different decisions kept per job (for `explain`); about 0.5 KB each


class Point(BaseModel):
    model_config = ConfigDict(frozen=True)

    samples_per_second: float
    observed_at: datetime


class StepName(StrEnum):
    """The settle pipeline's steps; a value is what a state annotation and the decision log
    store."""

    POLICY = "policy"  # the policy's count, or the count kept when it failed (`proposals`)
    HOLD = "hold"  # the job keeps its count this round (recovering, no data, cooling down...)
    QUEUE = "queue"  # the policy's 0 for a job that may not be held back: its minimum
    SUSPEND = "suspend"  # held back (suspended) on the policy's 0
    RESUME = "resume"  # a held-back job resumed at the count the policy gives it
    STARVATION = "starvation"  # a resume the starvation bound forces
    CLAMP = "clamp"  # within the job's minimum and maximum
    STABILISE = "stabilise"  # a scale-down no further than the window's recommendations
    RATE_LIMIT = "rate-limit"  # at most so many workers more or fewer per decision
    ALLOWED = "allowed"  # one of the job's allowed counts
    PENDING = "pending"  # no scale-up while pods, the gang or the quota wait
    LIMIT = "limit"  # deferred: at most so many rescales a round
    CAPACITY = "capacity"  # a scale-up the cluster has no room for, undone


class Step(BaseModel):
    """One settle step that changed the count (or held it), with its CamelCase reason."""

    model_config = ConfigDict(frozen=True)

    # A `StepName`, stored as its plain string: a state saved with a name this version does not
    # know still loads.
    name: str
    replicas: int
    reason: str
    message: str


class DecisionRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    time: datetime
    policy: str
    proposed: int
    replicas: int  # after every settle step
    reason: str
    message: str
    steps: list[Step] = []
    written: bool = False
    objective: float | None = None  # of the whole round's settled counts, in `time`'s round

    def repeats(self, earlier: "DecisionRecord") -> bool:
        """The same decision as `earlier`, taken again in a later round without a write."""
        return not self.written and _decided(self) == _decided(earlier)


def _decided(record: DecisionRecord) -> tuple[object, ...]:
    """What a decision decided: all but when it was made and the round's objective."""
    steps = tuple((s.name, s.replicas, s.reason, s.message) for s in record.steps)
    return (record.policy, record.proposed, record.replicas, record.reason, record.message,
            record.written, steps)  # fmt: skip


class PricedBatch(BaseModel):
    """How a goodput job was priced at the count it was last given (for `explain`)."""

    model_config = ConfigDict(frozen=True)

    noise_scale: float
    base_batch: int
    replicas: int
    batch: BatchAtCount
    running: RunningBatch | None = None  # the batch the job reports running at that count

    @property
    def goodput(self) -> float:
        """Samples at the base batch per second."""
        return self.batch.goodput

    @property
    def running_share(self) -> float | None:
        """The goodput of the batch the job runs over the price (None: it reports none here)."""
        if self.running is None or self.goodput <= 0:
            return None
        return self.running.goodput / self.goodput


class JobState(BaseModel):
    model_config = ConfigDict(frozen=True)

    replicas: int | None = None  # the count last seen, to notice changes made by others
    requested: int | None = None  # the count the job had when the engine first saw it
    throughput: dict[int, Point] = {}
    last_rescale: datetime | None = None
    rescales: int = 0
    # torchrun restarts the job's rescales may have spent on each worker: one per rescale,
    # either way (the most one spends; see `settle.rescaled`).
    restarts_spent: int = 0
    # What the job has done, integrated over the rounds the engine saw it run: samples (the
    # observed throughput x time) and worker-seconds (running workers x time), as of `accounted_at`.
    samples_done: float = 0.0
    attained_seconds: float = 0.0
    accounted_at: datetime | None = None
    recommendations: list[tuple[datetime, int]] = []
    # Queueing: how often the engine held the job back, and when the starvation bound last
    # resumed it (it is not held back again within `max_held_seconds` of that).
    suspensions: int = 0
    resumed_at: datetime | None = None
    forced_resume: datetime | None = None
    # Recovery (`autoscaler.engine.recovery`): why the job's world is not whole this round ("" when
    # it is), when it last was not, the restarts last seen, and the progress last seen to advance.
    # The marks are this engine's own observations, never stored: a new leader sees afresh.
    disturbance: str = ""
    disturbed_at: datetime | None = None
    restarts_seen: int | None = Field(default=None, exclude=True)
    progress_samples: float | None = Field(default=None, exclude=True)
    progressed_at: datetime | None = Field(default=None, exclude=True)
    # The count the job runs a world at (None: none) and since when this engine has seen it so
    # (when first seen: `recovery.first_seen`): a reading counts once its window lies after that.
    world: int | None = Field(default=None, exclude=True)
    world_since: datetime | None = Field(default=None, exclude=True)
    # Since when every round had a reading (None: not this round): after a gap, a rate window
    # reaching back into it reads a series that began inside it, too low.
    reading_since: datetime | None = Field(default=None, exclude=True)
    decisions: list[DecisionRecord] = []  # the latest few different ones, newest last
    goodput: PricedBatch | None = None  # a goodput job's latest pricing at its settled count

    @property
    def last_decision(self) -> DecisionRecord | None:
        return self.decisions[-1] if self.decisions else None

    def with_decision(self, record: DecisionRecord, **update: object) -> "JobState":
        """The state with `record` as its latest decision, and `update` (in the same copy). A
        decision that repeats the latest is not stored again: the history holds the latest
        few different decisions, each as of the round it was first made. A job's decision
        mostly repeats from round to round, and storing each repeat would give every round a new
        record per job for the collector to traverse (`make bench-scale`), for a history of copies
        of one decision."""
        last = self.last_decision
        if last is not None and record.repeats(last):
            return self.model_copy(update=update)
        decisions = [*self.decisions[-(HISTORY - 1) :], record]
        return self.model_copy(update={**update, "decisions": decisions})

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str) -> "JobState":
        """The saved state; an unreadable one is dropped (logged), never fatal."""
        if not text:
            return cls()
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            log.warning("ignoring an unreadable engine state: %s", error.errors()[0]["msg"])
            return cls()
