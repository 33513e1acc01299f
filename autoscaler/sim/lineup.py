"""The policies a comparison runs: installed plug-ins, `.py` files, or a named configuration.

A named configuration is an installed plug-in with a fixed config, not a plug-in of its own:

- `optimus`, `tiresias`: with goodput (`SimConfig.goodput`) their jobs keep the workload's batch,
  as Pollux's paper ran these baselines; `tiresias` runs with every job preemptible (it queues),
  and `optimus` is priced by its jobs' true rates at every count, not by what it observed
  (Optimus+Oracle, `SimConfig.oracle`).
- `pollux-style`: `speedup-optimizer` with the objective Pollux schedules by, the power mean of the
  jobs' speedups with p = -1, and its restart factor (the fitness function of Qiao et al.,
  "Pollux", OSDI'21).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.policies.contract import Policy
from autoscaler.policies.registry import PolicyError, build, find
from autoscaler.policies.throughput_model import EXPLORING, ThroughputModel


@dataclass(frozen=True)
class PolicyChoice:
    """`name` labels the results; `plugin` is an installed plug-in's name or a `.py` path."""

    name: str
    plugin: str
    config: Mapping[str, Any] = field(default_factory=dict)
    # With goodput, whether its jobs co-adapt their batch (else each keeps the workload's batch,
    # as Pollux's paper ran its baselines).
    adapts_batch: bool = True
    holds_back: bool = False  # it runs with every job preemptible (it queues jobs, as Tiresias)
    oracle: bool = False  # with goodput, priced by true rates (as the paper ran Optimus)


NAMED = {
    "optimus": PolicyChoice("optimus", "optimus", adapts_batch=False, oracle=True),
    "tiresias": PolicyChoice("tiresias", "tiresias", adapts_batch=False, holds_back=True),
    "pollux-style": PolicyChoice(
        "pollux-style",
        "speedup-optimizer",
        {"objective": {"kind": "power-mean", "exponent": -1.0}, "restart_discount": "age"},
    ),
}
DEFAULT_POLICIES = (
    "static",
    "equal-share",
    "hpa-like",
    "least-attained-service",
    "speedup-greedy",
    "optimus",
    "pollux-style",
    "speedup-optimizer",
    "afs-l",
    "afs-p",
    "hesrpt",
    "global-optimizer",
)


def choose(reference: str | PolicyChoice) -> PolicyChoice:
    """A named configuration, else the plug-in of that name (or file) with its defaults."""
    if isinstance(reference, PolicyChoice):
        return reference
    return NAMED.get(reference) or PolicyChoice(reference, reference)


def lineup(references: Iterable[str | PolicyChoice]) -> tuple[PolicyChoice, ...]:
    """The choices, each checked to load and to accept its config; labels must be unique."""
    choices = tuple(choose(reference) for reference in references)
    if not choices:
        raise PolicyError("no policy to simulate")
    names = [choice.name for choice in choices]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise PolicyError(f"policies listed twice: {', '.join(repeated)}")
    for choice in choices:
        built(choice)
    return choices


def built(choice: PolicyChoice) -> Policy:
    """The choice's policy; a bad config is an error naming the choice."""
    return build(find(choice.plugin), choice.config, label=choice.name)


def model_of(choice: PolicyChoice) -> str:
    """The throughput model the choice decides on: `exploring` (the lineup's), `plain` (the fit
    one worker past the data), `custom`, or `-` for a policy that reads no curve."""
    config = find(choice.plugin).config_model.model_validate(dict(choice.config))
    model = getattr(config, "model", None)
    if not isinstance(model, ThroughputModel):
        return "-"
    return {EXPLORING: "exploring", ThroughputModel(): "plain"}.get(model, "custom")
