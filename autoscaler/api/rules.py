"""The CEL validation rules of the CRD, each with a Python twin that gives the same message.

The API server enforces the CEL text; `autoscaler` commands run the twin, so a bad file gets the
same field and message offline as `kubectl apply` would get. A table test checks they agree.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoscaler.api import coordinates as c

JSON = dict[str, Any]
DNS_1035 = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
SUPPORTED_TYPES = "[" + ", ".join(f"'{t}'" for t in c.REPLICA_TYPES) + "]"


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One `x-kubernetes-validations` entry, anchored at `at` (a path of schema keys)."""

    at: tuple[str, ...]
    rule: str
    message_expression: str
    field_path: str
    reason: str = "FieldValueInvalid"
    # Returns the violation message, or None. Takes `self` and, for transition rules, `oldSelf`.
    twin: Callable[[Any, Any], str | None]

    @property
    def transition(self) -> bool:
        """A rule over `oldSelf` judges updates only, as the API server does."""
        return "oldSelf" in self.rule

    def to_schema(self) -> JSON:
        schema = {"rule": self.rule, "messageExpression": self.message_expression}
        if self.field_path:
            schema["fieldPath"] = self.field_path
        return {**schema, "reason": self.reason}


def _get(obj: Any, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


def _name_twin(job: JSON, _: Any) -> str | None:
    name = _get(job, "metadata", "name")
    if name is None or (len(name) <= 63 and _dns_1035(name)):
        return None
    return f'metadata.name "{name}" must be a DNS-1035 label: {_DNS_1035_HELP}'


def _dns_1035(name: str) -> bool:
    return re.fullmatch(DNS_1035, name) is not None


_DNS_1035_HELP = (
    "at most 63 lowercase letters, digits or '-', starting with a letter and ending with "
    "a letter or digit"
)


def _replica_types_twin(specs: JSON, _: Any) -> str | None:
    if all(key in c.REPLICA_TYPES for key in specs):
        return None
    return 'replica types must be exactly "Master" or "Worker" (case-sensitive)'


def _master_replicas_twin(spec: JSON, _: Any) -> str | None:
    specs = spec.get("pytorchReplicaSpecs", {})
    replicas = _get(specs, c.MASTER, "replicas", default=1)
    if c.MASTER not in specs or replicas == 1:
        return None
    return f"pytorchReplicaSpecs.Master.replicas must be 1, got {replicas}"


def _containers(spec: JSON) -> list[JSON]:
    return list(_get(spec, "template", "spec", "containers", default=[]))


def _containers_twin(spec: JSON, _: Any) -> str | None:
    return None if _containers(spec) else "template.spec.containers must not be empty"


def _image_twin(spec: JSON, _: Any) -> str | None:
    missing = [cont for cont in _containers(spec) if not cont.get("image")]
    return f'container "{missing[0].get("name")}" must have an image' if missing else None


def _pytorch_container_twin(spec: JSON, _: Any) -> str | None:
    if not _containers(spec) or any(
        cont.get("name") == c.DEFAULT_CONTAINER_NAME for cont in _containers(spec)
    ):
        return None
    return 'template.spec.containers must include a container named "pytorch"'


def _worker_required_twin(spec: JSON, _: Any) -> str | None:
    if "elasticPolicy" not in spec or c.WORKER in spec.get("pytorchReplicaSpecs", {}):
        return None
    return "pytorchReplicaSpecs.Worker must be configured if elastic policy is used"


def _nproc_twin(spec: JSON, _: Any) -> str | None:
    if "nprocPerNode" in spec and _get(spec, "elasticPolicy", "nProcPerNode") is not None:
        return (
            "elasticPolicy.nProcPerNode is deprecated and must not be set together with "
            "nprocPerNode: use only nprocPerNode"
        )
    return None


# torchrun's `--nproc-per-node` (torch 2.15, `torch/distributed/run.py`,
# `determine_local_world_size`): what Python's int() reads, or `cpu`, `gpu`, `xpu`, `auto`, or the
# name of a registered accelerator backend (PyTorch's "privateuse1" backends, e.g. `npu`, `hpu`).
# A name is only checked against the node's devices when torchrun starts; the form is checked
# here. Counts: exactly the ASCII strings int() reads as a positive number (surrounding ASCII
# whitespace, a `+`, leading zeros, single `_` between digits: " 4", "+4", "04", "1_0"). int()
# also reads other Unicode digits and spaces, whose set follows the Unicode version of the
# image's Python: those are left out on purpose (docs/pytorchjob.md). One pattern, read alike by
# Go's RE2 (the API server's CEL) and Python's re (`validate`); a raw string in both.
_INT_SPACE = r"[\t\n\v\f\r ]*"
NPROC_PER_NODE = rf"^({_INT_SPACE}[+]?(0_?)*[1-9](_?[0-9])*{_INT_SPACE}|[a-z][a-z0-9_]*)$"
NPROC_FORMS = "a positive integer, auto, cpu, gpu, xpu or an accelerator backend name"


def _nproc_form_twin(spec: JSON, _: Any) -> str | None:
    value = spec.get("nprocPerNode")
    if value is None or re.fullmatch(NPROC_PER_NODE, value):
        return None
    return f'nprocPerNode "{value}" is not a form torchrun accepts: {NPROC_FORMS}'


def _rdzv_conf_twin(policy: JSON, _: Any) -> str | None:
    entries = policy.get("rdzvConf") or []
    if all(entry.get("key") and entry.get("value") for entry in entries):
        return None
    return RDZV_CONF_MESSAGE


RDZV_CONF_MESSAGE = (
    "every rdzvConf entry needs a non-empty key and value: torchrun reads them as key=value pairs"
)


def _min_max_twin(policy: JSON, _: Any) -> str | None:
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    if low is None or high is None or low <= high:
        return None
    return f"elasticPolicy.minReplicas ({low}) must not exceed elasticPolicy.maxReplicas ({high})"


def _elastic_bounds(spec: JSON) -> tuple[int, int, int]:
    """Worker replicas and the effective bounds, defaulted as upstream does."""
    policy = spec["elasticPolicy"]
    replicas = _get(spec, "pytorchReplicaSpecs", c.WORKER, "replicas", default=1)
    low = policy.get("minReplicas", policy.get("maxReplicas", replicas))
    high = policy.get("maxReplicas", policy.get("minReplicas", replicas))
    return replicas, low, high


def _worker_in_bounds_twin(spec: JSON, _: Any) -> str | None:
    if "elasticPolicy" not in spec or c.WORKER not in spec.get("pytorchReplicaSpecs", {}):
        return None
    replicas, low, high = _elastic_bounds(spec)
    if low > high or low <= replicas <= high:
        return None
    return (
        f"pytorchReplicaSpecs.Worker.replicas ({replicas}) must be within "
        f"[elasticPolicy.minReplicas, elasticPolicy.maxReplicas] = [{low}, {high}]"
    )


def _managed_by_twin(spec: JSON, old: JSON) -> str | None:
    new_value = _get(spec, "runPolicy", "managedBy", default="")
    old_value = _get(old, "runPolicy", "managedBy", default="")
    return None if new_value == old_value else "runPolicy.managedBy is immutable"


def _queue_twin(queue: str, old: str) -> str | None:
    return None if queue == old else "spec.runPolicy.schedulingPolicy.queue is immutable"


# CEL building blocks. Optional chaining (`.?x.orValue(...)`) would hide the bounds the cost
# estimator needs, so presence is tested with has(); `replicas` always exists (schema default).
_R = "self.pytorchReplicaSpecs.Worker.replicas"
_MIN, _MAX = "self.elasticPolicy.minReplicas", "self.elasticPolicy.maxReplicas"
_LO = f"(has({_MIN}) ? {_MIN} : has({_MAX}) ? {_MAX} : {_R})"
_HI = f"(has({_MAX}) ? {_MAX} : has({_MIN}) ? {_MIN} : {_R})"
_HAS_POD_SPEC = "has(self.template) && has(self.template.spec)"
_CONTAINERS = "self.template.spec.containers"
_NO_IMAGE = "!has(c.image) || c.image == ''"
_MANAGED_BY = "(has({s}.runPolicy) && has({s}.runPolicy.managedBy) ? {s}.runPolicy.managedBy : '')"
_SPECS = ("spec", "pytorchReplicaSpecs")
_REPLICA_SPEC = (*_SPECS, "*")

RULES: tuple[Rule, ...] = (
    Rule(
        at=(),
        rule=f"size(self.metadata.name) <= 63 && self.metadata.name.matches('{DNS_1035}')",
        message_expression=(
            '\'metadata.name "%s" must be a DNS-1035 label: '
            + _DNS_1035_HELP.replace("'", "\\'")
            + "'.format([self.metadata.name])"
        ),
        field_path=".metadata.name",
        twin=_name_twin,
    ),
    Rule(
        at=_SPECS,
        rule=f"self.all(k, k in {SUPPORTED_TYPES})",
        message_expression=(
            '\'replica types must be exactly "Master" or "Worker" (case-sensitive)\''
        ),
        field_path="",
        twin=_replica_types_twin,
    ),
    Rule(
        at=("spec",),
        rule=(
            "!('Master' in self.pytorchReplicaSpecs) || "
            "self.pytorchReplicaSpecs.Master.replicas == 1"
        ),
        message_expression=(
            "'pytorchReplicaSpecs.Master.replicas must be 1, got %d'"
            ".format([self.pytorchReplicaSpecs.Master.replicas])"
        ),
        field_path=".pytorchReplicaSpecs['Master'].replicas",
        twin=_master_replicas_twin,
    ),
    Rule(
        at=_REPLICA_SPEC,
        rule=f"{_HAS_POD_SPEC} && size({_CONTAINERS}) > 0",
        message_expression="'template.spec.containers must not be empty'",
        field_path=".template",
        reason="FieldValueRequired",
        twin=_containers_twin,
    ),
    Rule(
        at=_REPLICA_SPEC,
        rule=f"!({_HAS_POD_SPEC}) || !{_CONTAINERS}.exists(c, {_NO_IMAGE})",
        message_expression=(
            "'container \"%s\" must have an image'"
            f".format([{_CONTAINERS}.filter(c, {_NO_IMAGE})[0].name])"
        ),
        field_path=".template",
        reason="FieldValueRequired",
        twin=_image_twin,
    ),
    Rule(
        at=_REPLICA_SPEC,
        rule=(
            f"!({_HAS_POD_SPEC}) || size({_CONTAINERS}) == 0 || "
            f"{_CONTAINERS}.exists(c, c.name == 'pytorch')"
        ),
        message_expression=(
            "'template.spec.containers must include a container named \"pytorch\"'"
        ),
        field_path=".template",
        reason="FieldValueRequired",
        twin=_pytorch_container_twin,
    ),
    Rule(
        at=("spec",),
        rule="!has(self.elasticPolicy) || 'Worker' in self.pytorchReplicaSpecs",
        message_expression=(
            "'pytorchReplicaSpecs.Worker must be configured if elastic policy is used'"
        ),
        field_path=".pytorchReplicaSpecs",
        reason="FieldValueRequired",
        twin=_worker_required_twin,
    ),
    Rule(
        at=("spec",),
        rule="!has(self.nprocPerNode) || !has(self.elasticPolicy) || "
        "!has(self.elasticPolicy.nProcPerNode)",
        message_expression=(
            "'elasticPolicy.nProcPerNode is deprecated and must not be set together with "
            "nprocPerNode: use only nprocPerNode'"
        ),
        field_path=".elasticPolicy.nProcPerNode",
        reason="FieldValueForbidden",
        twin=_nproc_twin,
    ),
    Rule(
        at=("spec",),
        rule=f"!has(self.nprocPerNode) || self.nprocPerNode.matches(r'{NPROC_PER_NODE}')",
        message_expression=(
            f"'nprocPerNode \"%s\" is not a form torchrun accepts: {NPROC_FORMS}'"
            ".format([self.nprocPerNode])"
        ),
        field_path=".nprocPerNode",
        twin=_nproc_form_twin,
    ),
    Rule(
        at=("spec", "elasticPolicy"),
        rule="!has(self.rdzvConf) || self.rdzvConf.all(e, has(e.key) && e.key != '' && "
        "has(e.value) && e.value != '')",
        message_expression=f"'{RDZV_CONF_MESSAGE}'",
        field_path=".rdzvConf",
        twin=_rdzv_conf_twin,
    ),
    Rule(
        at=("spec", "elasticPolicy"),
        rule="!has(self.minReplicas) || !has(self.maxReplicas) || "
        "self.minReplicas <= self.maxReplicas",
        message_expression=(
            "'elasticPolicy.minReplicas (%d) must not exceed elasticPolicy.maxReplicas (%d)'"
            ".format([self.minReplicas, self.maxReplicas])"
        ),
        field_path=".minReplicas",
        twin=_min_max_twin,
    ),
    Rule(
        at=("spec",),
        rule=(
            "!has(self.elasticPolicy) || !('Worker' in self.pytorchReplicaSpecs) || "
            f"{_LO} > {_HI} || ({_LO} <= {_R} && {_R} <= {_HI})"
        ),
        message_expression=(
            "'pytorchReplicaSpecs.Worker.replicas (%d) must be within "
            "[elasticPolicy.minReplicas, elasticPolicy.maxReplicas] = [%d, %d]'"
            f".format([{_R}, {_LO}, {_HI}])"
        ),
        field_path=".pytorchReplicaSpecs['Worker'].replicas",
        twin=_worker_in_bounds_twin,
    ),
    Rule(
        at=("spec",),
        rule=f"{_MANAGED_BY.format(s='self')} == {_MANAGED_BY.format(s='oldSelf')}",
        message_expression="'runPolicy.managedBy is immutable'",
        field_path=".runPolicy.managedBy",
        twin=_managed_by_twin,
    ),
    Rule(
        at=("spec", "runPolicy", "schedulingPolicy", "queue"),
        rule="self == oldSelf",
        message_expression="'spec.runPolicy.schedulingPolicy.queue is immutable'",
        field_path="",
        twin=_queue_twin,
    ),
)
