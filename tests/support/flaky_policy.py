"""A policy file for the engine (`policy.name: <this path>`): the global optimizer, raising on
every `fail_every`-th decision so that the engine falls back (`PolicyFailed`) now and then,
ending its worker process on every `die_every`-th, so that the engine replaces the worker, and
holding back every preemptible job on every `hold_every`-th, so that the engine suspends it."""

import dataclasses
import itertools
import os
from collections.abc import Sequence
from datetime import datetime

from pydantic import PositiveInt

from autoscaler.policies.contract import Decision, PolicyPlugin, Snapshot
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig


class FlakyConfig(GlobalOptimizerConfig):
    fail_every: PositiveInt = 4
    die_every: PositiveInt = 6  # counted per worker: a fresh one starts from 1
    hold_every: PositiveInt = 5


class FlakyOptimizer:
    def __init__(self, config: FlakyConfig) -> None:
        self.inner = GlobalOptimizer(config)
        self.fail_every, self.die_every = config.fail_every, config.die_every
        self.hold_every = config.hold_every
        self.calls = itertools.count(1)

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        call = next(self.calls)
        if call % self.die_every == 0:
            os._exit(1)  # the engine sees its worker die: PolicyFailed, and a fresh worker
        if call % self.fail_every == 0:
            raise RuntimeError("failing on purpose (tests/support/flaky_policy.py)")
        decisions = self.inner.decide(snapshot, now=now)
        if call % self.hold_every:
            return decisions
        preemptible = {job.key for job in snapshot.jobs if job.preemptible}
        return [
            dataclasses.replace(d, replicas=0, reason="HeldOnPurpose")
            if d.key in preemptible
            else d
            for d in decisions
        ]


PLUGIN = PolicyPlugin(
    name="flaky-global-optimizer",
    summary="the global optimizer, failing or dying every few decisions (tests only)",
    config_model=FlakyConfig,
    build=FlakyOptimizer,
)
