"""Hypothesis strategies for PyTorchJob manifests near every boundary the CRD draws.

Half the manifests are drawn valid: every field from the values just inside its bounds (replicas,
elastic min/max around the worker count, ports, restart and clean-pod policies, nprocPerNode
forms, rdzv settings, names of 1 to 63 characters, HPA metrics). The other half are a valid one
broken one or two ways: a value just outside its bound, a field removed, null or of a wrong type,
an unknown field, a bad replica type, a container without image or name. The API server judges.

Deliberately never drawn (see "What `validate` does not judge" in docs/pytorchjob.md):
`apiVersion`/`kind` other than PyTorchJob's (`validate` skips other documents of a file; the
server refuses them at the URL) and `metadata` other than a name (labels, annotations,
generateName: the server's ObjectMeta rules).

One generator for the fixed-seed set of the test suite and for `make fuzz` (`tests.fuzz`).
"""

import copy
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

JSON = dict[str, Any]
T = TypeVar("T")
INT32_MAX = 2**31 - 1
IMAGE = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"


def dns_label(length: int) -> str:
    """A DNS-1035 label of exactly `length` characters."""
    return ("j" + "a1-b" * 20)[: length - 1] + "z" if length > 1 else "j"


def container(name: str, image: str | None) -> JSON:
    out: JSON = {"name": name, "command": ["python", "-m", "torch.distributed.run", "echo.py"]}
    if image is not None:
        out["image"] = image
    return out


RESOURCE_METRIC = {
    "type": "Resource",
    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
}
WRONG_TYPES = ["two", 1.5, True, [], {}, "1"]

# Field (a path; `R` is every replica type present) -> values inside its bounds, values outside.
W = ("spec", "pytorchReplicaSpecs", "R")
E = ("spec", "elasticPolicy")
RUN = ("spec", "runPolicy")
SCHED = (*RUN, "schedulingPolicy")
BOUNDS: dict[tuple[str, ...], tuple[list[Any], list[Any]]] = {
    ("metadata", "name"): (
        ["echo", dns_label(1), dns_label(62), dns_label(63)],
        # a DNS-1123 subdomain that is no DNS-1035 label ("echo.v2"), and worse
        [dns_label(64), "9lives", "Echo", "echo-", "-echo", "echo.v2", "echo_v2", ""],
    ),
    (*W, "restartPolicy"): (["OnFailure", "Always", "Never", "ExitCode"], ["Sometimes", ""]),
    (*W, "template", "spec", "containers"): (
        [[container("pytorch", IMAGE)], [container("pytorch", IMAGE), container("side", "b")]],
        [
            [],
            [container("pytorch", None)],
            [container("pytorch", "")],
            [container("trainer", IMAGE)],
            [container("side", None), container("pytorch", IMAGE)],
        ],
    ),
    (*E, "rdzvBackend"): (["c10d", "etcd", "etcd-v2"], ["zookeeper", "C10D"]),
    (*E, "rdzvPort"): ([1, 29400, 65535], [0, 65536]),
    (*E, "rdzvHost"): (["etcd-client", ""], []),
    (*E, "rdzvId"): (["job-1", ""], []),
    (*E, "rdzvConf"): (
        [
            [{"key": "timeout", "value": "900"}],
            [{"key": "k" * 256, "value": "v" * 4096}],
            [{"key": f"k{i}", "value": "v"} for i in range(64)],
        ],
        [
            [{"key": "", "value": "900"}],
            [{"key": "timeout", "value": ""}],
            [{"key": "timeout"}],
            [{"value": "900"}],
            [{"key": "k" * 257, "value": "v"}],
            [{"key": "k", "value": "v" * 4097}],
            [{"key": f"k{i}", "value": "v"} for i in range(65)],
        ],
    ),
    (*E, "standalone"): ([True, False], []),
    (*E, "maxRestarts"): ([0, 3, INT32_MAX], [-1]),
    (*E, "metrics"): (
        [[RESOURCE_METRIC]],
        [
            [],
            [{"resource": RESOURCE_METRIC["resource"]}],  # no type
            [{"type": "Resource", "resource": {"name": "cpu"}}],  # no target
            [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}],
            [{**RESOURCE_METRIC, "resource": {"name": "cpu", "target": {"averageValue": "x"}}}],
        ],
    ),
    ("spec", "nprocPerNode"): (
        # counts as Python's int() reads them (what torchrun does with the value), and names
        ["auto", "cpu", "gpu", "xpu", "npu", "8", "1", "01", "+4", " 4\t", "1_0"],
        ["0", "00", "-1", "_4", "1__0", "4 gpus", "", "Auto", "a" * 64, "\u0664"],
    ),
    (*RUN, "cleanPodPolicy"): (["None", "Running", "All"], ["Some"]),
    (*RUN, "ttlSecondsAfterFinished"): ([0, 100, INT32_MAX], [-1]),
    (*RUN, "activeDeadlineSeconds"): ([0, 3600, 2**40], [-1]),
    (*RUN, "backoffLimit"): ([0, 3, INT32_MAX], [-1]),
    (*RUN, "suspend"): ([True, False], []),
    (*RUN, "managedBy"): (
        ["kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"],
        ["example.com/mine", ""],
    ),
    (*SCHED, "minAvailable"): ([0, 2], [-1]),
    (*SCHED, "queue"): (["q1", ""], []),
    (*SCHED, "minResources"): ([{"cpu": "2", "nvidia.com/gpu": 4}], [{"cpu": 1.5}]),
    (*SCHED, "priorityClass"): (["high"], []),
    (*SCHED, "scheduleTimeoutSeconds"): ([0, 60], [-1]),
}
OPTIONAL = [
    path for path in BOUNDS if path[:2] != ("metadata", "name") and "containers" not in path
]


def set_at(job: JSON, path: tuple[str, ...], value: Any) -> None:
    """Set `path` in `job` (creating maps on the way); `R` sets it in every replica spec."""
    if "R" in path:
        at = path.index("R")
        for kind in list(job["spec"]["pytorchReplicaSpecs"]):
            set_at(job, (*path[:at], kind, *path[at + 1 :]), value)
        return
    node = job
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = copy.deepcopy(value)


@st.composite
def valid_jobs(draw: st.DrawFn) -> JSON:
    """A job every field of which is inside its bounds, the worker count within min..max."""
    kinds = draw(st.sampled_from([["Worker"], ["Master", "Worker"]]))
    spec: JSON = {"pytorchReplicaSpecs": {kind: {} for kind in kinds}}
    job: JSON = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": spec}
    for path in BOUNDS:
        if path in OPTIONAL and not draw(st.booleans()):
            continue
        set_at(job, path, draw(st.sampled_from(BOUNDS[path][0])))
    if "Master" in kinds and draw(st.booleans()):
        spec["pytorchReplicaSpecs"]["Master"]["replicas"] = 1
    replicas = draw(st.sampled_from([1, 2, 3, INT32_MAX]))
    if replicas != 1 or draw(st.booleans()):
        spec["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    if "elasticPolicy" in spec or draw(st.booleans()):
        policy = spec.setdefault("elasticPolicy", {})
        if draw(st.booleans()):
            policy["minReplicas"] = draw(st.sampled_from(sorted({1, replicas})))
        if draw(st.booleans()):
            policy["maxReplicas"] = draw(st.sampled_from(sorted({replicas, INT32_MAX})))
        if "nprocPerNode" not in spec and draw(st.booleans()):
            policy["nProcPerNode"] = draw(st.sampled_from([1, 8]))
    return job


# The ways a valid job is broken: a bound crossed, or a structural change at a path.
OUTSIDE = [(path, value) for path, (_, outside) in BOUNDS.items() for value in outside]
CROSSED = [
    ((*W, "replicas"), 0),
    ((*W, "replicas"), -1),
    ((*W, "replicas"), 2**31),
    (("spec", "pytorchReplicaSpecs", "Master", "replicas"), 2),
    ((*E, "minReplicas"), 0),
    ((*E, "maxReplicas"), 0),
    ((*E, "minReplicas"), INT32_MAX),  # above the worker count, and maybe above max
    ((*E, "maxReplicas"), 1),  # below the worker count, and maybe below min
    ((*E, "nProcPerNode"), 4),  # together with spec.nprocPerNode, when that is set
    (("spec", "nprocPerNode"), "4"),
]
STRUCTURAL_PATHS: list[tuple[str, ...]] = [
    ("metadata",),
    ("metadata", "name"),
    ("spec",),
    ("spec", "pytorchReplicaSpecs"),
    ("spec", "pytorchReplicaSpecs", "Worker"),
    ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec"),
    ("spec", "pytorchReplicaSpecs", "Master"),
    *(path for path in BOUNDS if "R" not in path),
    (*E, "minReplicas"),
    (*E, "maxReplicas"),
    E,
    RUN,
    SCHED,
]
REPLICA_TYPE_CHANGES = [("Worker", "worker"), ("Master", "Chief"), ("Master", "Master ")]


def structural(job: JSON, path: tuple[str, ...], how: str, wrong: Any) -> None:
    """Remove, null, retype or misspell the field at `path`; nothing if its parent is absent."""
    parent: Any = job
    for key in path[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    last = path[-1]
    if not isinstance(parent, dict) or last not in parent:
        return
    if how == "remove":
        del parent[last]
    elif how == "null":
        parent[last] = None
    elif how == "wrong-type":
        parent[last] = wrong
    elif isinstance(parent[last], dict):
        parent[last]["unknownField"] = 1
    else:
        parent[last + "Typo"] = parent.pop(last)  # a misspelt field instead of the right one


@st.composite
def broken(draw: st.DrawFn, job: JSON) -> JSON:
    way = draw(st.sampled_from(["outside", "crossed", "structural", "replica-type"]))
    if way in ("outside", "crossed"):
        path, value = draw(st.sampled_from(OUTSIDE if way == "outside" else CROSSED))
        set_at(job, path, value)
    elif way == "structural":
        how = draw(st.sampled_from(["remove", "null", "wrong-type", "unknown-field"]))
        structural(
            job, draw(st.sampled_from(STRUCTURAL_PATHS)), how, draw(st.sampled_from(WRONG_TYPES))
        )
    else:
        old, new = draw(st.sampled_from(REPLICA_TYPE_CHANGES))
        specs = job["spec"]["pytorchReplicaSpecs"]
        specs[new] = specs.pop(old, None) or copy.deepcopy(next(iter(specs.values())))
    return job


@st.composite
def invalid_jobs(draw: st.DrawFn) -> JSON:
    """A valid job broken one or two ways (a second break may land where the first removed)."""
    job = draw(valid_jobs())
    for _ in range(draw(st.integers(1, 2))):
        if (
            isinstance(job.get("spec"), dict)
            and isinstance(job["spec"].get("pytorchReplicaSpecs"), dict)
            and job["spec"]["pytorchReplicaSpecs"]
        ):
            job = draw(broken(job))
    return job


def manifests() -> st.SearchStrategy[JSON]:
    """Valid and invalid PyTorchJob manifests, about half each."""
    return st.one_of(valid_jobs(), invalid_jobs())


def drawn(strategy: st.SearchStrategy[T], *, cases: int, seed_value: int) -> list[T]:
    """`cases` examples of `strategy`, the same ones for the same seed (hypothesis' own search,
    from simple to complex, without its database or shrinking: the caller judges each)."""
    out: list[T] = []

    @seed(seed_value)
    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(example: T) -> None:
        out.append(example)

    collect()
    return out
