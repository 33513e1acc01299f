"""The policy contract: what a policy sees (`Snapshot`), returns (`Decision`), and how it is built.

Field names of `Snapshot` and `Decision` are a public contract (JSON schema in
`docs/snapshot.schema.json`); add fields, never rename them.
"""

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from autoscaler.policies.objective import Objective
from autoscaler.policies.throughput_model import ThroughputModel


class BatchAtCount(BaseModel):
    """The batch a goodput job runs at one worker count: the one that maximises its goodput."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    local_batch: PositiveInt = Field(description="samples per replica and micro-step")
    accum_steps: NonNegativeInt = Field(
        description="micro-steps accumulated before the synchronising one (0 = none)"
    )
    global_batch: PositiveInt = Field(description="replicas x local_batch x (accum_steps + 1)")
    efficiency: float = Field(gt=0, le=1, description="statistical efficiency at global_batch")
    samples_per_second: NonNegativeFloat = Field(description="throughput at this batch")

    @property
    def goodput(self) -> float:
        """Samples at the base batch per second: throughput times efficiency."""
        return self.samples_per_second * self.efficiency


class RunningBatch(BatchAtCount):
    """The batch a goodput job reports running, priced by the same model as its best ones."""

    replicas: PositiveInt = Field(description="the worker count it runs this batch at")


class Goodput(BaseModel):
    """How a job sized by goodput was priced: its gradient noise and each count's best batch."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    noise_scale: NonNegativeFloat = Field(description="gradient noise scale at base_batch (PGNS)")
    base_batch: PositiveInt = Field(description="the global batch its work is counted at")
    batches: dict[int, BatchAtCount] = Field(
        default_factory=dict, description="the best batch at each count `throughput` prices"
    )
    running: RunningBatch | None = Field(
        default=None,
        description="the batch the job reports running, priced by the same model and noise as"
        " `batches` (None: it reports none)",
    )


class ModelCurve(BaseModel):
    """A job's curve from a model, not from observation, in the unit its remaining work counts."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    source: Literal["goodput", "declared", "prior"] = Field(
        description="where the model comes from: `goodput`, the engine's pricing of a job that"
        " reports its gradient statistics (goodput in samples at its base batch per second);"
        " `declared`, the samples/s the job declared (its throughput-profile annotation), shown"
        " while it waits, and while it runs too under the engine's `trust_declared_profiles`;"
        " `prior`, the engine's `waiting_prior` for a waiting job it never"
        " observed (samples/s scaling linearly at the median per-worker rate of the running"
        " jobs with its resources per worker)"
    )
    values: dict[int, NonNegativeFloat] = Field(
        default_factory=dict,
        description="the curve at each worker count the model prices (`declared`: only the"
        " declared counts, a policy fits the others; no exploration bound applies to a model)",
    )


class JobSnapshot(BaseModel):
    """One engine-managed elastic job, as the engine observed it this round."""

    # NaN or Infinity in a snapshot file is an error naming the field: a solver given an infinite
    # size failed with a traceback (found by tests/unit/test_cli_inputs_fuzz.py).
    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)

    namespace: str = Field(description="the job's namespace; `key` is (namespace, name)")
    name: str = Field(description="the job's name")
    min_replicas: PositiveInt = Field(description="the fewest workers the job may run at")
    max_replicas: PositiveInt = Field(description="the most workers (never below min_replicas)")
    replicas: PositiveInt = Field(description="the job's current worker count (its /scale spec)")
    resources_per_replica: dict[str, NonNegativeFloat] = Field(
        default_factory=dict, description="requests of one worker pod, e.g. {'nvidia.com/gpu': 4}"
    )
    weight: float = Field(default=1.0, gt=0, description="relative priority in the objective")
    throughput: dict[int, float] = Field(
        default_factory=dict,
        description="observed throughput (samples/s) by worker count; may cover only some"
        " counts. What was read, never a model: a model's curve is `curve`",
    )
    throughput_age_seconds: dict[int, NonNegativeFloat] = Field(
        default_factory=dict,
        description="seconds since each count's throughput was last observed (absent = fresh)",
    )
    age_seconds: NonNegativeFloat | None = Field(
        default=None,
        description="seconds since the job was created; None when unknown (a rule that needs it,"
        " such as Pollux's restart factor, is then not applied)",
    )
    seconds_since_rescale: NonNegativeFloat | None = Field(
        default=None, description="None when the job was never rescaled"
    )
    rescales: NonNegativeInt = Field(
        default=0,
        description="changes of the job's count the engine has seen (its own writes and anyone"
        " else's, holds and resumes included)",
    )
    restart_seconds: NonNegativeFloat | None = Field(
        default=None, description="this job's stall per rescale; None = the policy's default"
    )
    restarts_remaining: int | None = Field(
        default=None, description="torchrun restart budget left (None = unknown or unlimited)"
    )
    remaining_samples: NonNegativeFloat | None = Field(
        default=None,
        description="samples left to train: the declared total minus the samples trained so far"
        " (the training helper's progress gauge, else the observed throughput integrated over"
        " the rounds); None = no total declared",
    )
    attained_seconds: NonNegativeFloat = Field(
        default=0.0,
        description="worker-seconds the job has run so far (running workers x seconds, as the"
        " engine observed them); times resources_per_replica gives resource-seconds",
    )
    requested_replicas: PositiveInt | None = Field(
        default=None,
        description="the count the job had when the engine first saw it (what its user asked"
        " for); None = not known",
    )
    allowed_replicas: tuple[PositiveInt, ...] | None = Field(
        default=None,
        description="the only counts the job may run at, ascending within [min, max]"
        " (None = every count in the bounds)",
    )
    preemptible: bool = Field(
        default=False,
        description="the policy may give the job 0 workers: the engine then holds it back"
        " (suspends it) until a count comes again; False = at least min_replicas",
    )
    suspended: bool = Field(
        default=False,
        description="held back by the engine: no worker runs, replicas is the count it last ran"
        " at, and any count it is given resumes it (a restart, from its checkpoint)",
    )
    held_seconds: NonNegativeFloat | None = Field(
        default=None, description="seconds since the engine held the job back (when suspended)"
    )
    waiting: bool = Field(
        default=False,
        description="no worker of the job runs and the policy decides when it starts: it is held"
        " back (`suspended`), or it is preemptible and has not started yet (no worker ever ran,"
        " none is placed). `replicas` stays the count it would start at; a policy starts it at"
        " any count it allows, or leaves it at 0 (held back) when `preemptible`, sizing it by"
        " `curve` when it has one",
    )
    goodput: Goodput | None = Field(
        default=None,
        description="set when the job is sized by goodput: `curve` and `remaining_samples` are"
        " then in samples at its base batch; None = plain samples",
    )
    curve: ModelCurve | None = Field(
        default=None,
        description="the job's curve from a model (and where it comes from), in the unit of"
        " `remaining_samples`: a policy sizes the job by it, not by `throughput`. A waiting job"
        " has one from its declared profile, else (no earlier observation of it) the engine's"
        " prior; None = only observations, which a policy fits and explores itself",
    )

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @model_validator(mode="after")
    def _bounds(self) -> "JobSnapshot":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} > max_replicas {self.max_replicas}")
        allowed = self.allowed_replicas
        if allowed is not None and (
            not allowed
            or list(allowed) != sorted(set(allowed))
            or not self.min_replicas <= allowed[0] <= allowed[-1] <= self.max_replicas
        ):
            raise ValueError(
                f"allowed_replicas {list(allowed)} must be ascending, distinct and within"
                f" [min_replicas, max_replicas] = [{self.min_replicas}, {self.max_replicas}]"
            )
        return self

    def allows(self, count: int) -> bool:
        """Whether the job may run at `count` (its bounds, and its allowed counts if any)."""
        inside = self.min_replicas <= count <= self.max_replicas
        return inside and (self.allowed_replicas is None or count in self.allowed_replicas)


class EngineBounds(BaseModel):
    """What the engine enforces on a policy's wishes before it writes a count, so that a policy
    can plan within it. A policy's decisions are wishes: a count the bounds forbid this round is
    written later, or never."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)

    interval_seconds: PositiveFloat = Field(description="time between two rounds")
    max_held_seconds: PositiveFloat = Field(
        description="starvation bound: a preemptible job held back this long is resumed at least"
        " at its minimum, whatever the policy wishes"
    )
    min_run_seconds: NonNegativeFloat = Field(
        description="a job the engine resumed is not held back again for this long"
    )
    cooldown_seconds: NonNegativeFloat = Field(
        description="minimum time between two rescales of one job"
    )
    scale_down_stabilization_seconds: NonNegativeFloat = Field(
        description="a job is scaled down only to the highest count wished in this window"
    )
    scale_up_max_pods: PositiveInt = Field(
        description="most workers added to a job in one round (or the percent, if larger)"
    )
    scale_up_max_percent: PositiveFloat = Field(
        description="most workers added to a job in one round, as % of its count"
    )
    scale_down_max_percent: PositiveFloat = Field(
        le=100.0, description="most workers removed from a job in one round, as % (at least 1)"
    )
    max_rescales_per_round: PositiveInt | None = Field(
        description="most jobs rescaled in one round (null: no limit)"
    )


class Snapshot(BaseModel):
    """Everything a policy may see: the capacity it may hand out and every job it sizes."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)

    capacity: dict[str, NonNegativeFloat] = Field(
        default_factory=dict, description="resources the engine may give its jobs, e.g. GPUs"
    )
    jobs: list[JobSnapshot] = Field(default_factory=list)
    bounds: EngineBounds | None = Field(
        default=None,
        description="what the engine enforces on the decisions before it writes them; null: no"
        " engine applies them (a policy run on its own, e.g. `autoscaler decide`)",
    )

    @model_validator(mode="after")
    def _unique(self) -> "Snapshot":
        counts = Counter(job.key for job in self.jobs)
        duplicates = sorted(f"{ns}/{name}" for (ns, name), count in counts.items() if count > 1)
        if duplicates:
            raise ValueError(f"jobs listed twice: {', '.join(duplicates)}")
        return self


@dataclass(frozen=True)
class Decision:
    """A policy's wish for one job: a worker count, a CamelCase reason and a message for people.
    0 holds the job back (only a `preemptible` job; any other is kept at its minimum)."""

    namespace: str
    name: str
    replicas: int
    reason: str
    message: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


class Policy(Protocol):
    """Decides every job's worker count from a snapshot. Pure: no I/O, no wall clock."""

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]: ...


@dataclass(frozen=True)
class Reporting:
    """How the engine scores a policy's rounds in its reports (the decision log, the objective
    metric, `autoscaler decide`, the simulator): the objective of the decided counts, with each
    job's throughput curve from `model`. It only scores: it never changes a decision."""

    objective: Objective = field(default_factory=Objective)
    model: ThroughputModel = field(default_factory=ThroughputModel)


@runtime_checkable
class ReportingPolicy(Policy, Protocol):
    """A policy that states how its rounds are scored. Optional: a policy without `reporting`
    is scored with `Reporting()`, the default objective and throughput model."""

    @property
    def reporting(self) -> Reporting: ...


def reporting_of(policy: Policy) -> Reporting:
    """The policy's own `reporting`, else the defaults; a `reporting` of another type is an
    error (the registry reports it when the policy is built)."""
    if not isinstance(policy, ReportingPolicy):
        return Reporting()
    declared: object = policy.reporting
    if not isinstance(declared, Reporting):
        kind = type(declared).__name__
        raise TypeError(f"{type(policy).__name__}.reporting is a {kind}, not a Reporting")
    return declared


ConfigT = TypeVar("ConfigT", bound=BaseModel)


class PolicyConfig(BaseModel):
    """Base of every policy's configuration: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class PolicyPlugin(Generic[ConfigT]):
    """What a plug-in exports (entry point group `autoscaler.policies`, or `PLUGIN` in a file)."""

    name: str
    summary: str
    config_model: type[ConfigT]
    build: Callable[[ConfigT], Policy]
