"""The simulated cluster: the engine's ports over a virtual clock, workloads and profiles.

`compare` runs policies on a workload (the bundled default unless told otherwise) and returns a
`Comparison`: the figures of each policy beside lower bounds no policy can beat.
"""

from autoscaler.sim.comparison import Comparison, compare
from autoscaler.sim.lineup import DEFAULT_POLICIES, PolicyChoice
from autoscaler.sim.outcome import PolicyRun
from autoscaler.sim.simulation import SimConfig

__all__ = ["DEFAULT_POLICIES", "Comparison", "PolicyChoice", "PolicyRun", "SimConfig", "compare"]
