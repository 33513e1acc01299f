"""Where an elastic job's workers should land (pure): on as few nodes as their requests fill.

The policy engine prices an elastic job's throughput as if its workers were packed, while
kube-scheduler's default scoring (least allocated, balanced allocation) spreads them. So every
worker of an elastic job carries a preferred pod affinity to the job's own workers on the node's
hostname: the scheduler favours a node that already runs one of them, and a worker still starts
on any node that fits when none does (it is never required). Non-elastic jobs are built as
upstream's operator builds them, with no affinity added.
"""

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller.naming import replica_type_labels

HOSTNAME = "kubernetes.io/hostname"
WEIGHT = 100  # the most a preferred term may weigh, so packing outweighs spreading
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def wants_packing(job: PyTorchJob, *, replica_type: str) -> bool:
    """A worker of an elastic job: the pods whose placement the engine's curves assume."""
    return job.spec.elastic_policy is not None and replica_type == c.WORKER


def pack_term(job: PyTorchJob) -> JSON:
    """The preferred term that draws a worker to a node running the job's other workers."""
    workers = replica_type_labels(job_name=job.name, replica_type=c.WORKER)
    return {
        "weight": WEIGHT,
        "podAffinityTerm": {"labelSelector": {"matchLabels": workers}, "topologyKey": HOSTNAME},
    }


def packed_with_workers(job: PyTorchJob, *, own: JSON | None) -> JSON:
    """The template's affinity (`own`, kept whole) with the packing term beside its own
    preferred pod affinity terms; a term the template already holds is not added twice."""
    affinity = dict(own or {})
    pod = dict(affinity.get("podAffinity") or {})
    preferred = list(pod.get(PREFERRED) or [])
    term = pack_term(job)
    pod[PREFERRED] = preferred if term in preferred else [*preferred, term]
    return {**affinity, "podAffinity": pod}
