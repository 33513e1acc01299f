"""The engine's configuration file (YAML), validated by its model; unknown keys are errors."""

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from autoscaler.api.errors import yaml_problem
from autoscaler.policies.registry import DEFAULT_POLICY
from autoscaler.torchrun import RESCALE_STALL_SECONDS

WaitingPrior = Literal["none", "running-median"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicySelection(Strict):
    """Which policy decides, and its configuration."""

    name: str = Field(
        default=DEFAULT_POLICY, description="an installed policy, or a path to a .py file"
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="validated by the policy's model"
    )
    timeout_seconds: PositiveFloat = Field(default=10.0, description="a slower decision is dropped")
    isolation: Literal["process", "thread"] = Field(
        default="process",
        description="process: decide in a worker process, killed and replaced when a call"
        " overruns its time or memory; thread: in the engine's own process (a hung call is"
        " never stopped, a leak grows the engine)",
    )
    # 256: the global optimizer's worker holds 116 MB after deciding 5,000 jobs (88 MB loaded),
    # and the engine itself 666 MB at that size (benchmarks.md): both fit the pod's 1Gi limit.
    max_memory_mb: PositiveFloat = Field(
        default=256.0,
        description="process isolation: a worker whose resident memory passes this is replaced"
        " (the engine's own memory plus this must fit the pod's limit)",
    )
    start_timeout_seconds: PositiveFloat = Field(
        default=60.0, description="process isolation: time a new worker has to load the plug-in"
    )


class PrometheusSource(Strict):
    """Where training throughput is read (see autoscaler.training for the reporting side)."""

    url: str = Field(default="http://localhost:9090", description="Prometheus' HTTP API base URL")
    query: str | None = Field(
        default=None,
        description="PromQL with {namespace}, {name} (escaped) and {window}; None = default",
    )
    window: str = Field(default="2m", description="the template's {window}")
    job_query_namespaces: list[str] | None = Field(
        default=None,
        description="the namespaces whose jobs may set their own throughput-query annotation"
        " (confined to their namespace either way); null = every namespace, [] = none",
    )
    timeout_seconds: PositiveFloat = Field(default=5.0, description="per query; a round waits once")
    bearer_token_file: Path | None = Field(default=None, description="re-read every round")
    verify_tls: bool = Field(default=True, description="CA bundle: $REQUESTS_CA_BUNDLE")


class SettleConfig(Strict):
    """The steps between a policy's wish and a write; defaults follow torchrun's measured stalls."""

    settle_seconds: NonNegativeFloat = Field(
        default=180.0,
        description="after a rescale or a recovery, readings are ignored this long"
        " (restart + window)",
    )
    stall_seconds: PositiveFloat = Field(
        default=60.0,
        description="a running job whose reported progress has not advanced this long is"
        " recovering: held, its readings not recorded",
    )
    stale_after_seconds: PositiveFloat = Field(
        default=900.0, description="a count's throughput older than this is not used"
    )
    cooldown_seconds: NonNegativeFloat = Field(
        default=180.0, description="minimum time between two rescales of one job"
    )
    scale_down_stabilization_seconds: NonNegativeFloat = Field(
        default=120.0, description="scale down only to the highest recommendation of this window"
    )
    scale_up_max_pods: PositiveInt = Field(
        default=4, description="most workers added per decision (or the percent, if larger)"
    )
    scale_up_max_percent: PositiveFloat = Field(
        default=100.0, description="most workers added per decision, as % of the current count"
    )
    scale_down_max_percent: PositiveFloat = Field(
        default=50.0, le=100.0, description="most workers removed per decision, as % (at least 1)"
    )
    max_rescales_per_round: PositiveInt | None = Field(
        default=50,
        description="most jobs rescaled in one round, the rest in later ones (a resume the"
        " starvation bound forces always goes, first); null = no limit",
    )
    min_run_seconds: NonNegativeFloat = Field(
        default=600.0,
        description="a job the engine resumed is not held back again for this long (each hold"
        " and resume costs a restart)",
    )
    max_held_seconds: PositiveFloat = Field(
        default=3600.0,
        description="a preemptible job the engine held back this long is resumed at least at its"
        " minimum whatever the policy wishes, and then not held back again for as long",
    )


class EngineConfig(Strict):
    """`autoscaler engine --config FILE`."""

    interval_seconds: PositiveFloat = Field(default=30.0, description="time between rounds")
    namespaces: list[str] = Field(
        default_factory=list, description="size only the jobs of these namespaces; empty = all"
    )
    policy: PolicySelection = PolicySelection()
    prometheus: PrometheusSource = PrometheusSource()
    settle: SettleConfig = SettleConfig()
    capacity: dict[str, NonNegativeFloat] | None = Field(
        default=None, description="resources the engine may hand out; None = measured from nodes"
    )
    restart_seconds: NonNegativeFloat = Field(
        default=RESCALE_STALL_SECONDS,
        description="stall of one rescale (the measured median with the operator's rdzv settings)",
    )
    waiting_prior: WaitingPrior = Field(
        default="none",
        description="the curve of a waiting job that declared none and was never observed:"
        " `none` (it starts at its count, as a job the policy knows nothing of) or"
        " `running-median` (linear at the median samples/s per worker of the running jobs of its"
        " hardware; `make bench-sim`'s admission rows measure it)",
    )
    trust_declared_profiles: bool = Field(
        default=False,
        description="price a running job by the samples/s it declared (its throughput-profile"
        " annotation) rather than by what it is observed to do, with no exploration bound; by"
        " default a declared profile prices a job only while it waits (a job sized by goodput"
        " keeps its goodput curve either way). For profiles measured on the same hardware and"
        " batch; the simulator runs `optimus` so with goodput, as Pollux's paper ran"
        " Optimus+Oracle",
    )
    decision_log: Path | None = Field(default=None, description="JSON lines, one per job and round")
    write_concurrency: PositiveInt = Field(
        default=8, description="jobs written at once (each job's /scale, then its state)"
    )
    state_save_seconds: PositiveFloat = Field(
        default=300.0, description="rewrite an unchanged job's state annotation at most this often"
    )
    state_refreshes_per_round: PositiveInt = Field(
        default=20, description="most unchanged states rewritten in a round, the oldest first"
    )


def load_config(path: Path | None) -> EngineConfig:
    """The file's configuration (defaults when no file); a YAML or schema error says where."""
    if path is None:
        return EngineConfig()
    return EngineConfig.model_validate(read_yaml(path))


class ConfigError(ValueError):
    """A config file that is no YAML at all; the message is one line naming the file."""


def read_yaml(path: Path) -> Any:
    """The file's YAML document (None when empty becomes {})."""
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: {yaml_problem(error)}") from None
