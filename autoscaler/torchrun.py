"""What torchrun's elastic agent (c10d rendezvous) does under rescaling, stated once.

Measured with the project's training scenarios (`make e2e`: PyTorch 2.15 CPU build, gloo, torchrun
pods scheduled by kube-scheduler and run by a test node agent, rescaled by the engine and by
hand; docs/real-training.md gives the figures) and by reading torch's
`torch/distributed/elastic` sources.
"""

from typing import Final

# torchrun's `--max-restarts` when PET_MAX_RESTARTS is unset (elasticPolicy.maxRestarts absent).
# Each agent has its own budget, never refilled. A scale-down fails the survivors' workers, which
# spends one on each unless its agent saw the membership change first (measured: both happen);
# a scale-up re-forms the world through the rendezvous, which is not counted (none of the
# scale-ups measured spent one; torch's sources allow it when a worker sees its peer's crash
# before its agent sees the newcomer). With none left, a failed worker ends the agent.
DEFAULT_MAX_RESTARTS: Final = 0

# Without it, torch's default "shared store" path has the rank-0 agent cache the workers' store
# address after its first round, so a node joining later waits on a key nobody writes and, after
# the 60 s read timeout, every agent exits (GitHub issues pytorch/pytorch#135712 and
# pytorch/pytorch#123678 show it).
DISABLE_SHARED_STORE: Final = {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}

# c10d settings for elastic jobs without an rdzvConf of their own. torch's defaults wait 30 s
# after the minimum joins before completing a round below the maximum (`last_call_timeout`) and
# call a silent node dead after 5 s x 3. These cut the last call to 3 s and the expiry to 2 s x 3.
# The expiry must exceed one keep-alive interval plus the 1 s state cache plus the clock skew
# between nodes, else a joining node declares live ones dead and trains a second world beside
# them: 6 s tolerates < ~3 s of skew. The last call batches joins: pods that start further apart
# than it cost one restart each, and a longer one stalls every join (`make e2e`'s stall figures).
TUNED_RDZV_CONF: Final = "last_call_timeout=3,keep_alive_interval=2,keep_alive_max_attempt=3"

# The median stall of a rescale with TUNED_RDZV_CONF, from the /scale write (or the kill) to the
# first step at the new world size on every rank, as `make e2e` measured it. The engine and the
# simulator price a rescale at this by default.
RESCALE_STALL_SECONDS: Final = 15.0
