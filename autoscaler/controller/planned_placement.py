"""The planned placement (pure), `--planned-placement RESOURCE` (default `nvidia.com/gpu`): the
operator, not kube-scheduler one pod at a time, chooses the nodes of the workers that request
RESOURCE of each elastic torchrun job the engine sizes (`qualifies`), as one unit, on as few nodes
as they fill (`autoscaler.api.packing`, the rule the simulator's planned mode measures).

Each such worker is created held by a scheduling gate (GATE). The placement step
(`placement_runtime`, one at a time) then takes the jobs with gated workers, largest first:
- a job takes the most workers of its spec that pack, at least its minimum; a running job more
  than it has placed, else it stays as it is. Its placed workers' room counts as free (they may
  move);
- every placed worker whose node stays in the placement is kept. A placement without worker-0's
  node moves the whole job: worker-0 hosts the rendezvous, and the operator restarts every
  worker when it goes;
- gated workers are pinned to the placement's other nodes (a `kubernetes.io/hostname` node
  selector, the gate lifted: kube-scheduler still binds them), and placed workers whose node
  leaves it are deleted (their replacements, gated again, are pinned by a later step);
- the rest stay gated: they wait for room, as the job's Event says.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON, PyTorchJob
from autoscaler.api.ownership import Owner, job_owner
from autoscaler.api.packing import home, kept, packed
from autoscaler.api.quantity import exact_quantity
from autoscaler.api.timestamps import parse_timestamp
from autoscaler.controller import placement, torchft
from autoscaler.controller.placement import HOSTNAME
from autoscaler.controller.pods import is_terminating, phase

GATE = "elastic-autoscaler.io/placement"
PINNED = "elastic-autoscaler.io/placed-on"  # annotation: the node a worker was pinned to


def qualifies(job: PyTorchJob, *, replica_type: str, resource: str) -> bool:
    """A worker the planned placement places: of an elastic torchrun job without a Master (its
    ranks follow rendezvous, not the pod's index) whose count the engine writes (the curves it
    prices assume packed workers; a count another owner fixed starts as soon as it fits),
    requesting `resource`, whose template requires nothing of its node's neighbours or labels
    the placement would not read."""
    if job.spec.elastic_policy is None or replica_type != c.WORKER or job.master is not None:
        return False
    if job_owner(job) is not Owner.ENGINE:
        return False
    if torchft.requested(job):
        return False
    template = job.spec.pytorch_replica_specs[c.WORKER].template or {}
    pod_spec = template.get("spec") or {}
    return requested(pod_spec, resource) > 0 and not constrained(pod_spec)


def constrained(pod_spec: JSON) -> bool:
    """Whether a pod requires an affinity, an anti-affinity or a hard spread: kube-scheduler
    alone honours those, so such a job's workers are left to it."""
    affinity = pod_spec.get("affinity") or {}
    required = any(
        (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity")
    )
    spreads = pod_spec.get("topologySpreadConstraints") or []
    return required or any(s.get("whenUnsatisfiable") == "DoNotSchedule" for s in spreads)


def requested(pod_spec: JSON, resource: str) -> int:
    """Whole units of `resource` a pod's containers request (their limits where they set no
    request, as the API server defaults an extended resource's request)."""
    total = 0
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or {}).get(resource)
        if amount is None:
            amount = (resources.get("limits") or {}).get(resource)
        if amount is not None:
            total += units(amount)
    return total


def units(amount: str | int | float) -> int:
    """Whole units of a resource quantity."""
    return int(exact_quantity(str(amount)))


def gates(pod: JSON) -> list[JSON]:
    """The pod's scheduling gates, ours or others'."""
    return list((pod.get("spec") or {}).get("schedulingGates") or [])


def gated(pod: JSON) -> bool:
    """Held by the planned placement's gate."""
    return any(gate.get("name") == GATE for gate in gates(pod))


def node_of(pod: JSON) -> str | None:
    """The node a pod holds room on: bound, or pinned and not bound yet (None: neither, or done)."""
    bound = placement.node_of(pod)
    if bound is not None or phase(pod) in ("Succeeded", "Failed"):
        return bound
    if gates(pod):
        return None
    pinned = ((pod.get("metadata") or {}).get("annotations") or {}).get(PINNED)
    return str(pinned) if pinned else None


def allows(template_spec: JSON, node: JSON) -> bool:
    """Whether a pod of this template may go on `node` by its node selector and its tolerations
    of the node's NoSchedule and NoExecute taints (a template that requires more is not placed,
    `constrained`; a pin the scheduler cannot bind is undone, `unbindable_since`)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    wanted = template_spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in wanted.items() if key != HOSTNAME):
        return False
    tolerations = template_spec.get("tolerations") or []
    return all(
        any(tolerates(toleration, taint) for toleration in tolerations)
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )


def tolerates(toleration: JSON, taint: JSON) -> bool:
    """Kubernetes' rule (`k8s.io/api/core/v1` `Toleration.ToleratesTaint`)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (
        taint.get("value") or ""
    )


def allocatable(node: JSON, resource: str) -> int:
    """The node's allocatable units of `resource` (0 without any)."""
    amount = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    return units(amount) if amount is not None else 0


def room(nodes: Iterable[JSON], pods: Iterable[JSON], *, resource: str) -> dict[str, int]:
    """Free units of `resource` on each node pods may be placed on (Ready, schedulable)."""
    free: dict[str, int] = {}
    for node in nodes:
        status, spec = node.get("status") or {}, node.get("spec") or {}
        ready = any(
            cond.get("type") == "Ready" and cond.get("status") == "True"
            for cond in status.get("conditions") or []
        )
        if (
            ready
            and not spec.get("unschedulable")
            and resource in (status.get("allocatable") or {})
        ):
            free[node["metadata"]["name"]] = allocatable(node, resource)
    for pod in pods:
        holder = node_of(pod)
        if holder in free:
            free[holder] -= requested(pod.get("spec") or {}, resource)
    return free


@dataclass(frozen=True)
class Worker:
    name: str
    index: int
    node: str | None  # bound or pinned; None: gated


@dataclass(frozen=True)
class Unit:
    """A job's live workers, as the placement sees them."""

    key: tuple[str, str]
    minimum: int
    size: int  # units of the resource per worker
    workers: tuple[Worker, ...]
    leaving: bool = False  # some of its workers are being deleted: placed once they are gone
    fits: Callable[[str], bool] = lambda _node: True  # the nodes its workers' template allows

    @property
    def waiting(self) -> list[Worker]:
        return sorted((w for w in self.workers if w.node is None), key=lambda w: w.index)


@dataclass(frozen=True)
class Decision:
    pins: dict[str, str]  # gated worker -> its node
    movers: tuple[str, ...] = ()  # placed workers to delete: their node left the placement
    reserved: tuple[str, ...] = ()  # the nodes the movers' replacements are to take


def place_unit(unit: Unit, free: Mapping[str, int], *, per_node: int) -> Decision | None:
    """Where `unit`'s gated workers go, and which placed ones move; None: it stays as it is."""
    waiting = unit.waiting
    if not waiting or unit.leaving:
        return None
    names = sorted(name for name in free if unit.fits(name))
    position = {name: i for i, name in enumerate(names)}
    placed = {w.index: w.node for w in unit.workers if w.node is not None}
    room_now = [free[name] for name in names]
    for node in placed.values():
        if node in position:  # its own room may be used again
            room_now[position[node]] += unit.size
    low = max(unit.minimum, len(placed) + 1) if placed else unit.minimum
    # Each placed worker's node by position (-1: a node it may no longer use).
    current = {index: position.get(node, -1) for index, node in placed.items()}
    target = packed(
        room_now, low=low, high=len(unit.workers), size=unit.size, per_node=per_node,
        prefer=home(current),
    )  # fmt: skip
    if target is None:
        return None
    by_index = {w.index: w.name for w in unit.workers}
    if 0 in placed and placed[0] not in {names[i] for i in target}:
        # Worker-0 hosts the rendezvous, and its loss restarts every worker: the job moves whole
        # (its workers deleted, their replacements placed together by a later step).
        everyone = tuple(by_index[index] for index in sorted(placed))
        return Decision(pins={}, movers=everyone, reserved=tuple(names[i] for i in target))
    stay, new = kept(current, target)
    movers = tuple(by_index[index] for index in sorted(placed) if index not in stay)
    pins = {w.name: names[node] for w, node in zip(waiting, new, strict=False)}
    reserved = tuple(names[node] for node in new[len(pins) :])
    return Decision(pins=pins, movers=movers, reserved=reserved)


def place(
    units: Sequence[Unit], free: Mapping[str, int], *, per_node: int
) -> dict[tuple[str, str], Decision]:
    """Each unit's decision, largest first (then by key), each taking the room the ones before
    it pinned or reserved."""
    left = dict(free)
    decisions: dict[tuple[str, str], Decision] = {}
    for unit in sorted(units, key=lambda u: (-len(u.workers) * u.size, u.key)):
        decision = place_unit(unit, left, per_node=per_node)
        if decision is None:
            continue
        decisions[unit.key] = decision
        for node in [*decision.pins.values(), *decision.reserved]:
            left[node] -= unit.size
    return decisions


def pin_patch(pod: JSON, node: str) -> JSON:
    """The merge patch that pins a gated pod to `node` and lifts the gate (other gates kept)."""
    patch = ungate_patch(pod)
    patch["spec"]["nodeSelector"] = {HOSTNAME: node}
    return {"metadata": {"annotations": {PINNED: node}}, **patch}


def ungate_patch(pod: JSON) -> JSON:
    """The merge patch that lifts the gate (other gates kept)."""
    others = [gate for gate in gates(pod) if gate.get("name") != GATE]
    return {"spec": {"schedulingGates": others or None}}


def unbindable_since(pod: JSON, *, before: datetime) -> bool:
    """A pinned pod kube-scheduler found unschedulable since before `before`, still unbound."""
    pinned = ((pod.get("metadata") or {}).get("annotations") or {}).get(PINNED)
    if not pinned or (pod.get("spec") or {}).get("nodeName"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            since = cond.get("lastTransitionTime")
            return since is not None and parse_timestamp(since) < before
    return False


def live(pods: Iterable[JSON]) -> list[JSON]:
    """The pods neither being deleted nor done."""
    return [
        pod for pod in pods if not is_terminating(pod) and phase(pod) not in ("Succeeded", "Failed")
    ]


def worker_layout(pods: Iterable[JSON]) -> JSON:
    """A job's live workers as `explain` shows them: how many hold room on each node (bound, or
    pinned and not bound yet), how many the gate holds until they pack, and how many are
    neither (left to kube-scheduler, not bound yet)."""
    nodes: Counter[str] = Counter()
    waiting = unbound = 0
    for pod in live(pods):
        node = node_of(pod)
        if node is not None:
            nodes[node] += 1
        elif gated(pod):
            waiting += 1
        else:
            unbound += 1
    return {"nodes": dict(sorted(nodes.items())), "waiting_for_room": waiting, "unbound": unbound}
