"""A policy file for the policy runner's fault cases (`policy.name: <this path>`): the global
optimizer, misbehaving as its config says.

State that must outlive a worker (a hang that happens once) lives in a file, not in memory: a
replaced worker starts from the plug-in's config again.
"""

import os
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import NonNegativeInt

from autoscaler.policies.contract import Decision, PolicyPlugin, Snapshot
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig

Behaviour = Literal["decide", "raise", "hang", "exit", "invalid", "leak", "bloat"]


class MisbehavingConfig(GlobalOptimizerConfig):
    behaviour: Behaviour = "decide"
    hang_once_file: str | None = None  # with "hang": hang once, creating this file
    leak_mb: NonNegativeInt = 50  # with "leak": kept per call, never freed; "bloat": then hang


class MisbehavingOptimizer:
    def __init__(self, config: MisbehavingConfig) -> None:
        self.inner = GlobalOptimizer(config)
        self.config = config
        self.kept: list[bytes] = []

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        behaviour = self.config.behaviour
        if behaviour == "raise":
            raise RuntimeError("failing on purpose")
        if behaviour == "exit":
            os._exit(3)  # a crash the worker cannot report: the engine sees EOF
        if behaviour == "bloat":
            self.kept.append(b"\x01" * (self.config.leak_mb << 20))  # written: resident
        if behaviour == "bloat" or (behaviour == "hang" and self._hangs(snapshot)):
            while True:  # never returns; only SIGKILL ends it
                time.sleep(0.01)
        if behaviour == "invalid":
            return [Decision("ns", "job", 2.5, "X", "y")]  # type: ignore[arg-type]
        if behaviour == "leak":
            self.kept.append(b"\x01" * (self.config.leak_mb << 20))  # written: resident
        return self.inner.decide(snapshot, now=now)

    def _hangs(self, snapshot: Snapshot) -> bool:
        """Always, or with `hang_once_file`: once, at the first call with a throughput to
        decide on (before it, the engine holds every job anyway)."""
        marker = self.config.hang_once_file
        if marker is None:
            return True
        if not any(job.throughput for job in snapshot.jobs):
            return False
        if Path(marker).exists():
            return False
        Path(marker).touch()  # the next worker finds it and decides
        return True


PLUGIN = PolicyPlugin(
    name="misbehaving-global-optimizer",
    summary="the global optimizer, raising, hanging, exiting or leaking on purpose (tests only)",
    config_model=MisbehavingConfig,
    build=MisbehavingOptimizer,
)
