"""A policy file for the engine (`policy.name: <this path>`): the global optimizer, raising on
every `fail_every`-th decision so that the engine falls back (`PolicyFailed`) now and then."""

import itertools
from collections.abc import Sequence
from datetime import datetime

from pydantic import PositiveInt

from autoscaler.policies.contract import Decision, PolicyPlugin, Snapshot
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig


class FlakyConfig(GlobalOptimizerConfig):
    fail_every: PositiveInt = 4


class FlakyOptimizer:
    def __init__(self, config: FlakyConfig) -> None:
        self.inner = GlobalOptimizer(config)
        self.every = config.fail_every
        self.calls = itertools.count(1)

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        if next(self.calls) % self.every == 0:
            raise RuntimeError("failing on purpose (tests/support/flaky_policy.py)")
        return self.inner.decide(snapshot, now=now)


PLUGIN = PolicyPlugin(
    name="flaky-global-optimizer",
    summary="the global optimizer, failing every few decisions (tests only)",
    config_model=FlakyConfig,
    build=FlakyOptimizer,
)
