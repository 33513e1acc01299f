"""The engine's settings in the simulator: one function, the same for every policy.

The production defaults (`SettleConfig`: settle 180 s, cooldown 180 s, scale-down stabilisation
120 s) are sized for a real cluster: a torchrun restart of 30-50 s plus a Prometheus window of 2 m
before a reading reflects the new count. In the simulator a reading is exact as soon as the
restart is over, and decisions come every `interval_seconds`, so the time constants follow the
simulated restart and interval instead:

- `settle_seconds = restart_seconds + interval_seconds`: a reading is attributed to a count only
  after the restart is over and a whole interval was trained at it, the simulated twin of
  "restart + window" (with the defaults, 30 + 60 = 90 s: the second round after a rescale);
- `cooldown_seconds` = the same: a job is not rescaled again before its last count was measured;
- `scale_down_stabilization_seconds` = the same: a scale-down goes no lower than the highest
  recommendation since that measurement;
- `restart_seconds` = the simulated one, so policies price a rescale at what it really costs;
- `interval_seconds` = the simulated one;
- everything else (staleness, rate limits, the policy's time budget) keeps its production default.
"""

from collections.abc import Mapping
from typing import Any

from autoscaler.engine.config import EngineConfig, PolicySelection, SettleConfig
from autoscaler.sim.simulation import SimConfig


def engine_config(sim: SimConfig, *, policy: str, config: Mapping[str, Any]) -> EngineConfig:
    """The engine's configuration for one simulated run of `policy` (its plug-in config)."""
    measured = sim.restart_seconds + sim.interval_seconds
    return EngineConfig(
        interval_seconds=sim.interval_seconds,
        restart_seconds=sim.restart_seconds,
        waiting_prior=sim.waiting_prior,
        trust_declared_profiles=sim.oracle,
        policy=PolicySelection(name=policy, config=dict(config)),
        settle=SettleConfig(
            settle_seconds=measured,
            cooldown_seconds=measured,
            scale_down_stabilization_seconds=measured,
        ),
    )
