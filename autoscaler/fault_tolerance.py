"""What the operator and a torchft training script agree on (torchft 0.2.0, pytorch/torchft).

A job opts in with the annotation `elastic-autoscaler.io/fault-tolerance: torchft`. Each Worker
pod is then one torchft replica group (one process); the job's lighthouse Pod forms a quorum every
step, a joining group heals from a live peer, a leaving one is dropped after the heartbeat
timeout, and no surviving process restarts. The operator sets the variables below in every
worker; `autoscaler.training.fault_tolerant` reads them. Standard library only: training images
import this module.
"""

from typing import Final

# The operator's reading of these annotations (values, defaults, reports) is declared in
# autoscaler.api.operator_annotations; the keys live here, where training images read them too.
ANNOTATION: Final = "elastic-autoscaler.io/fault-tolerance"
TORCHFT: Final = "torchft"  # the one supported value
# Per-job lighthouse timeouts (milliseconds), each overriding the default below.
ANNOTATION_HEARTBEAT_TIMEOUT: Final = "elastic-autoscaler.io/torchft-heartbeat-timeout-ms"
ANNOTATION_JOIN_TIMEOUT: Final = "elastic-autoscaler.io/torchft-join-timeout-ms"
ANNOTATION_QUORUM_TICK: Final = "elastic-autoscaler.io/torchft-quorum-tick-ms"

LIGHTHOUSE_PORT: Final = 29510  # torchft_lighthouse's default bind port
LIGHTHOUSE_COMMAND: Final = "torchft_lighthouse"  # a console script of the torchft wheel
# A group gone silent is dropped after this, what survivors pay for every leave; below
# torchft's 5 s default, it is what `make e2e`'s pause figures measure.
DEFAULT_HEARTBEAT_TIMEOUT_MS: Final = 1000
# How long a quorum that lost a member waits for the rest; torchft's default waits a minute
# (`make e2e` measures a leave's pause at this setting).
DEFAULT_JOIN_TIMEOUT_MS: Final = 500
DEFAULT_QUORUM_TICK_MS: Final = 100  # torchft's default

# The environment of a worker pod. torchft's Manager reads TORCHFT_LIGHTHOUSE, MASTER_ADDR/PORT
# (the group's own TCPStore, which the group's rank 0 creates), RANK and WORLD_SIZE (inside the
# group) and TORCHFT_TIMEOUT_SEC; the replica group id, the minimum and the pod IP are this
# project's (torchft takes them as arguments).
ENV_LIGHTHOUSE: Final = "TORCHFT_LIGHTHOUSE"
ENV_REPLICA_GROUP: Final = "REPLICA_GROUP_ID"  # the pod's index: a replaced pod reuses it
ENV_MIN_REPLICAS: Final = "TORCHFT_MIN_REPLICAS"  # the elastic minimum: fewer groups never commit
ENV_POD_IP: Final = "POD_IP"  # advertised to peers, which cannot resolve the pod's hostname
ENV_TIMEOUT: Final = "TORCHFT_TIMEOUT_SEC"
# A collective or commit waits this long for a peer (torchft: 60 s): a peer that vanished without
# closing its sockets (a lost node) fails the step after this, then the quorum drops it. A step
# takes ~0.1 s; a timeout that fires on a slow peer only fails that step, which is retried. A
# worker container that sets the variable itself keeps its own value.
DEFAULT_TIMEOUT_SECONDS: Final = 4

# A resize of a torchft job, as the engine prices it: survivors' longest gap between committed
# steps, the median of `make e2e`'s torchft scenarios.
RESIZE_PAUSE_SECONDS: Final = 1.5


def lighthouse_name(job_name: str) -> str:
    """The lighthouse Pod's and its Service's name."""
    return f"{job_name}-lighthouse"


def lighthouse_url(job_name: str) -> str:
    return f"http://{lighthouse_name(job_name)}:{LIGHTHOUSE_PORT}"
