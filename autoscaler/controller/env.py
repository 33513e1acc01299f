"""The torchrun environment of a pod, in upstream's order, plus the settings torchrun needs
to survive rescaling (`autoscaler.torchrun`)."""

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, ElasticPolicy, PyTorchJob, ReplicaSpec
from autoscaler.controller.naming import replica_name
from autoscaler.torchrun import DISABLE_SHARED_STORE, TUNED_RDZV_CONF


class MissingPortError(ValueError):
    """The `pytorch` container of a replica spec has no `pytorchjob-port` port."""


def torchrun_env(
    job: PyTorchJob, *, replica_type: str, index: int, store: str | None = None
) -> list[JSON]:
    """The variables appended to every container of a pod; `job` must be defaulted; `store`:
    the `host:port` of the job's own rendezvous store, when it has one."""
    env = [_var("PYTHONUNBUFFERED", "1")]
    if job.master is not None:
        env += _master_env(job, replica_type=replica_type, index=index)
    if job.spec.nproc_per_node is not None:
        env.append(_var("PET_NPROC_PER_NODE", job.spec.nproc_per_node))
    if job.spec.elastic_policy is not None:
        env += elastic_env(job, store=store)
    else:
        env.append(_var("PET_NNODES", str(total_replicas(job))))
    return env


def _master_env(job: PyTorchJob, *, replica_type: str, index: int) -> list[JSON]:
    assert job.master is not None
    port = str(pytorch_port(job.master))
    address = replica_name(job_name=job.name, replica_type=c.MASTER, index=0)
    rank = str(index if replica_type == c.MASTER else index + 1)
    return [
        _var("MASTER_PORT", port),
        _var("PET_MASTER_PORT", port),
        _var("MASTER_ADDR", address),
        _var("PET_MASTER_ADDR", address),
        _var("WORLD_SIZE", str(total_replicas(job) * procs_per_node(job))),
        _var("RANK", rank),
        _var("PET_NODE_RANK", rank),
    ]


def elastic_env(job: PyTorchJob, *, store: str | None = None) -> list[JSON]:
    """torchrun's elastic settings; with a `store` of its own every agent joins it as a client,
    else the rendezvous is hosted in worker-0 (upstream)."""
    policy = job.spec.elastic_policy
    assert policy is not None
    assert job.worker is not None
    host = policy.rdzv_host or replica_name(job_name=job.name, replica_type=c.WORKER, index=0)
    port = policy.rdzv_port or pytorch_port(job.worker)
    conf = rdzv_conf(policy)
    if store is not None and "is_host=" not in conf:
        conf = ",".join(part for part in (conf, CLIENT_ONLY) if part)
    env = [
        _var("PET_RDZV_ENDPOINT", store or f"{host}:{port}"),
        _var("PET_RDZV_BACKEND", policy.rdzv_backend or c.DEFAULT_RDZV_BACKEND),
        _var("PET_NNODES", f"{policy.min_replicas}:{policy.max_replicas}"),
    ]
    optional = [
        ("PET_MAX_RESTARTS", policy.max_restarts),
        ("PET_NPROC_PER_NODE", policy.n_proc_per_node),
        ("PET_RDZV_ID", policy.rdzv_id),
        ("PET_RDZV_CONF", conf),
        ("PET_STANDALONE", "1" if policy.standalone else None),  # upstream: "", not an int
    ]
    return env + [_var(name, str(value)) for name, value in optional if value not in (None, "")]


CLIENT_ONLY = "is_host=0"  # no agent hosts the rendezvous: the job's store pod does


def rdzv_conf(policy: ElasticPolicy) -> str:
    """The job's own `rdzvConf`, else the tuned c10d settings (other backends: torch's)."""
    if policy.rdzv_conf:
        return ",".join(f"{kv.key}={kv.value}" for kv in policy.rdzv_conf)
    backend = policy.rdzv_backend or c.DEFAULT_RDZV_BACKEND
    return TUNED_RDZV_CONF if backend == c.DEFAULT_RDZV_BACKEND else ""


def with_env(container: JSON, *, env: list[JSON], elastic: bool) -> JSON:
    """The container with `env` appended after its own variables (upstream's order)."""
    own = list(container.get("env") or [])
    extra = list(env)
    if elastic and DISABLE_SHARED_STORE["name"] not in {var.get("name") for var in own}:
        extra.append(dict(DISABLE_SHARED_STORE))
    return {**container, "env": own + extra}


def total_replicas(job: PyTorchJob) -> int:
    return sum(spec.replicas or 0 for spec in job.spec.pytorch_replica_specs.values())


def procs_per_node(job: PyTorchJob) -> int:
    """`nprocPerNode` as a number, read as torchrun reads it (int(): `+4`, ` 4`, `1_0` too);
    `auto`, `cpu`, `gpu`, another name and unset count as 1 (upstream)."""
    try:
        return int(job.spec.nproc_per_node or "")
    except ValueError:
        return 1


def pytorch_port(spec: ReplicaSpec) -> int:
    for port in pytorch_container(spec.template or {}).get("ports") or []:
        if port.get("name") == c.DEFAULT_PORT_NAME:
            return int(port["containerPort"])
    raise MissingPortError(f'container "pytorch" has no port named "{c.DEFAULT_PORT_NAME}"')


def pytorch_container(template: JSON) -> JSON:
    """The template's container named `pytorch` (the CRD requires one), else `{}`."""
    containers = (template.get("spec") or {}).get("containers") or []
    named = [cont for cont in containers if cont.get("name") == c.DEFAULT_CONTAINER_NAME]
    return dict(named[0]) if named else {}


def _var(name: str, value: str) -> JSON:
    return {"name": name, "value": value}
