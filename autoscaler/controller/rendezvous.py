"""The rendezvous store pod (pure): an elastic torchrun job whose rendezvous lives beside it, not
in worker-0.

Upstream's manifests point every agent's c10d rendezvous at worker-0, whose agent hosts the
store: when worker-0's node goes silent, the survivors block in that store for its read timeout
and the job trains again only once worker-0 is back. A job that opts in with the annotation
`elastic-autoscaler.io/rendezvous: store` gets a small store Pod (the worker image's torch, a
c10d TCPStore server and nothing else) and a Service of the same name, owned by the job, the
way torchft mode runs its lighthouse. Every worker then joins as a client (`is_host=0`), so no
worker is special: a silent worker-0 costs the survivors their collective timeout and one
re-form. A store that ends is replaced; its workers' agents fail their rendezvous and restart.
"""

from autoscaler.api import coordinates as c
from autoscaler.api import operator_annotations as oa
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.controller.naming import job_labels, owner_reference
from autoscaler.controller.side_pods import side_pod

ANNOTATION = c.ANNOTATION_RENDEZVOUS  # declared in autoscaler.api.operator_annotations
STORE = c.RENDEZVOUS_STORE
STORE_TYPE = "rendezvous"  # its replica-type label: no Worker or Master slot counts it
STATUS_KEY = "Rendezvous"  # its counts in status.replicaStatuses
PORT = 29400  # torchrun's customary rendezvous port
# It holds a few keys per agent: torch's import is most of it.
RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}}
# A c10d TCPStore server that waits for nobody, then sleeps while it serves.
SERVER = (
    "import signal, sys, torch.distributed as d; "
    "store = d.TCPStore('0.0.0.0', int(sys.argv[1]), is_master=True, wait_for_workers=False); "
    "signal.pause()"
)


def requested(job: PyTorchJob) -> bool:
    return ANNOTATION in (job.metadata.annotations or {})


def problem(job: PyTorchJob) -> str | None:
    """Why the job's rendezvous store cannot be run, if it cannot: its annotation first, then
    the job's spec."""
    if not requested(job):
        return None
    _, invalid = oa.read_operator_annotations(job.metadata.annotations or {})
    refused = [i.message for i in invalid if i.mode is oa.RENDEZVOUS]
    policy = job.spec.elastic_policy
    backend = (policy.rdzv_backend if policy else None) or c.DEFAULT_RDZV_BACKEND
    checks = [
        *((True, message) for message in refused),
        (policy is None, f"{ANNOTATION} needs spec.elasticPolicy: a store serves torchrun agents"),
        (
            policy is not None and (policy.rdzv_host or policy.rdzv_port) is not None,
            f"{ANNOTATION} replaces elasticPolicy.rdzvHost and rdzvPort: set neither",
        ),
        (
            backend != c.DEFAULT_RDZV_BACKEND,
            f'{ANNOTATION} needs the c10d rendezvous backend, not "{backend}"',
        ),
        (job.master is not None, f"{ANNOTATION} needs a job without a Master"),
    ]
    return next((message for failed, message in checks if failed), None)


def store_name(job_name: str) -> str:
    """The store Pod's and its Service's name."""
    return f"{job_name}-rendezvous"


def endpoint(job_name: str) -> str:
    return f"{store_name(job_name)}:{PORT}"


def store_labels(job: PyTorchJob) -> dict[str, str]:
    return {**job_labels(job.name), c.LABEL_REPLICA_TYPE: STORE_TYPE}


def desired_store_pod(job: PyTorchJob) -> JSON:
    worker = job.worker
    assert worker is not None
    own = ((worker.template or {}).get("spec") or {}).get("affinity")
    return side_pod(
        job,
        name=store_name(job.name),
        role="rendezvous",
        labels=store_labels(job),
        command=["python", "-c", SERVER, str(PORT)],
        port=PORT,
        resources=RESOURCES,
        affinity=spread_from_workers(job, own=own),
    )


def spread_from_workers(job: PyTorchJob, *, own: JSON | None) -> JSON:
    """The workers' affinity, plus a preference for a node without the job's workers: a lost
    node then takes the store or a worker, rarely both."""
    affinity = dict(own or {})
    anti = dict(affinity.get("podAntiAffinity") or {})
    workers = {**job_labels(job.name), c.LABEL_REPLICA_TYPE: c.WORKER.lower()}
    term = {
        "weight": 100,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": workers},
            "topologyKey": "kubernetes.io/hostname",
        },
    }
    preferred = list(anti.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    anti["preferredDuringSchedulingIgnoredDuringExecution"] = [*preferred, term]
    return {**affinity, "podAntiAffinity": anti}


def desired_store_service(job: PyTorchJob) -> JSON:
    port = {"name": "rendezvous", "port": PORT, "targetPort": PORT}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": store_name(job.name),
            "namespace": job.metadata.namespace,
            "labels": store_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {"clusterIP": "None", "selector": store_labels(job), "ports": [port]},
    }


def is_store(obj: JSON) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_REPLICA_TYPE) == STORE_TYPE
