"""Where an elastic job's workers should land (pure): on as few nodes as their requests fill.

The policy engine prices an elastic job's throughput as if its workers were packed, while
kube-scheduler's default scoring (least allocated, balanced allocation) spreads them. So every
worker of an elastic job carries a preferred pod affinity to the job's own workers on the node's
hostname: the scheduler favours a node that already runs one of them, and a worker still starts
on any node that fits when none does (it is never required). Non-elastic jobs are built as
upstream's operator builds them, with no affinity added.

Which workers leave is the operator's choice: an elastic torchrun job's scale-down empties its
least-filled nodes first (`autoscaler.api.worker_indices`), so its indices need not stay
contiguous. torchrun ranks a node by rendezvous, not by its pod's index. Jobs whose workers are
numbered by index keep upstream's rule (the highest indices go): torchft's replica groups, and
the ranks given beside a Master.
"""

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.api.worker_indices import leaving, lowest_free
from autoscaler.controller.naming import replica_type_labels
from autoscaler.controller.pods import is_terminating, phase

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


def empties_least_filled(job: PyTorchJob, *, replica_type: str, fault_tolerant: bool) -> bool:
    """Workers whose scale-down empties the job's least-filled nodes first: an elastic torchrun
    job's, unless torchft or a Master numbers them by index."""
    numbered = fault_tolerant or job.master is not None
    return wants_packing(job, replica_type=replica_type) and not numbered


def node_of(pod: JSON) -> str | None:
    """The node a pod holds a place on (None: pending, or done with its place)."""
    if phase(pod) in ("Failed", "Succeeded"):
        return None
    return (pod.get("spec") or {}).get("nodeName") or None


def kept_indices(slots: dict[int, list[JSON]], *, replicas: int) -> set[int]:
    """The indices an elastic torchrun job's workers should have: those present (a pod not being
    deleted) less the ones a scale-down removes, then the lowest free. A slot whose pod is being
    deleted counts as free, so a restarted pod comes back at its own index."""
    present = {
        index: node_of(live[0])
        for index, pods in slots.items()
        if (live := [pod for pod in pods if not is_terminating(pod)])
    }
    kept = set(present) - set(leaving(present, keep=replicas))
    return kept | set(lowest_free(kept, count=replicas - len(kept)))
