"""The planned placement's decisions (pure): which nodes a job's gated workers are pinned to,
which placed workers move, and the room the pods leave."""

from datetime import timedelta
from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller import planned_placement as pp
from autoscaler.controller.builders import PodSettings, desired_pod
from autoscaler.controller.placement import HOSTNAME
from tests.integration.test_operator import elastic_job
from tests.support.clock import NOW

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"


def unit(placed: dict[int, str | None], *, minimum: int = 1, size: int = 1) -> pp.Unit:
    """A job's workers by index: the node each is on, None while gated."""
    workers = tuple(pp.Worker(f"w-{i}", i, node) for i, node in sorted(placed.items()))
    return pp.Unit(("ns", "j"), minimum, size, workers)


@pytest.mark.parametrize(
    ("placed", "free", "minimum", "pins", "movers", "reserved"),
    [
        # A new job of 4 goes whole on the node it fills, not over the holes of two.
        ({0: None, 1: None, 2: None, 3: None}, {"a": 2, "b": 2, "c": 4}, 1, "cccc", (), ""),
        # Too big for one node: the roomiest first, the rest on the tightest that holds them.
        ({i: None for i in range(6)}, {"a": 4, "b": 3, "c": 2}, 1, "aaaacc", (), ""),
        # Only 3 of 4 pack (on one node): the fourth waits.
        ({0: None, 1: None, 2: None, 3: None}, {"a": 3, "b": 1}, 1, "aaa", (), ""),
        # Not even its minimum packs: all wait.
        ({0: None, 1: None, 2: None}, {"a": 1, "b": 1, "c": 1}, 2, None, (), ""),
        # Growing 2 -> 4 where its node is full: the job moves whole onto a node that holds 4
        # (worker-0's loss restarts every worker: all go, and come back to be placed together).
        ({0: "a", 1: "a", 2: None, 3: None}, {"a": 0, "b": 4}, 1, "", ("w-0", "w-1"), "bbbb"),
        # Growing 2 -> 4 with worker-0's node roomy enough: the newcomers join it.
        ({0: "a", 1: "a", 2: None, 3: None}, {"a": 2, "b": 4}, 1, "aa", (), ""),
        # Growing 3 -> 4: worker 2 alone on b moves to a, where 0, 1 and the newcomer fit.
        # (its replacement, gated again, is pinned to a by the next step).
        ({0: "a", 1: "a", 2: "b", 3: None}, {"a": 2, "b": 3}, 1, "a", ("w-2",), "a"),
        # Growing 1 -> 2 where two nodes are as roomy: beside worker-0, nothing moves.
        ({0: "b", 1: None}, {"a": 2, "b": 1}, 1, "b", (), ""),
        # A running job grows only by more than it has placed: 2 placed, only room for 2.
        ({0: "a", 1: "b", 2: None}, {"a": 0, "b": 0, "c": 0}, 1, None, (), ""),
    ],
)
def test_a_job_is_placed_as_one_unit_on_the_fewest_nodes(
    placed: dict[int, str | None],
    free: dict[str, int],
    minimum: int,
    *,
    pins: str | None,
    movers: tuple[str, ...],
    reserved: str,
) -> None:
    """`reserved`: the nodes kept this step for the movers' replacements."""
    decision = pp.place_unit(unit(placed, minimum=minimum), free, per_node=4)
    if pins is None:
        assert decision is None
        return
    assert decision is not None
    assert "".join(decision.pins[name] for name in sorted(decision.pins)) == pins
    assert decision.movers == movers
    assert "".join(decision.reserved) == reserved


def test_larger_jobs_are_placed_first_and_each_takes_the_room_it_pinned() -> None:
    small = pp.Unit(("ns", "small"), 1, 1, tuple(pp.Worker(f"s-{i}", i, None) for i in range(2)))
    large = pp.Unit(("ns", "large"), 1, 1, tuple(pp.Worker(f"l-{i}", i, None) for i in range(4)))
    decisions = pp.place([small, large], {"a": 4, "b": 2}, per_node=4)
    assert set(decisions[("ns", "large")].pins.values()) == {"a"}
    assert set(decisions[("ns", "small")].pins.values()) == {"b"}


def node(name: str, gpus: int, *, ready: bool = True, unschedulable: bool = False) -> JSON:
    status = "True" if ready else "False"
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "allocatable": {GPU: str(gpus)},
            "conditions": [{"type": "Ready", "status": status}],
        },
    }


def pod(gpus: int, *, node: str | None = None, pinned: str | None = None, **spec: Any) -> JSON:
    resources = {"limits": {GPU: str(gpus)}}
    annotations = {pp.PINNED: pinned} if pinned else {}
    return {
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": resources}], "nodeName": node, **spec},
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_room_is_what_bound_and_pinned_pods_leave_on_ready_schedulable_nodes() -> None:
    nodes = [
        node("a", 4),
        node("b", 4),
        node("down", 4, ready=False),
        node("off", 4, unschedulable=True),
    ]
    pods = [
        pod(2, node="a"),
        pod(1, pinned="b"),  # pinned, not bound yet
        pod(1, pinned="b", schedulingGates=[{"name": "other"}]),  # still held by another gate
        {**pod(1, node="b"), "status": {"phase": "Succeeded"}},  # done: its room is free
    ]
    assert pp.room(nodes, pods, resource=GPU) == {"a": 2, "b": 3}


def manifest(**changes: Any) -> PyTorchJob:
    job = elastic_job("j", replicas=2, low=1, high=4)
    job["metadata"]["namespace"] = "ns"
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"limits": {GPU: "1"}}
    job["spec"].update(changes)
    return default_job(PyTorchJob.model_validate(job))


def test_qualifying_workers_are_created_gated_and_the_pin_lifts_only_that_gate() -> None:
    settings = PodSettings(placement_resource=GPU)
    built = desired_pod(manifest(), replica_type="Worker", index=1, settings=settings)
    assert built["spec"]["schedulingGates"] == [{"name": pp.GATE}]
    assert pp.gated(built)
    assert pp.node_of(built) is None
    plain = desired_pod(manifest(), replica_type="Worker", index=1)
    assert "schedulingGates" not in plain["spec"]
    other = desired_pod(
        manifest(),
        replica_type="Worker",
        index=1,
        settings=PodSettings(placement_resource="x.io/tpu"),
    )
    assert "schedulingGates" not in other["spec"]
    built["spec"]["schedulingGates"].insert(0, {"name": "someone-else"})
    assert pp.pin_patch(built, "a") == {
        "metadata": {"annotations": {pp.PINNED: "a"}},
        "spec": {"nodeSelector": {HOSTNAME: "a"}, "schedulingGates": [{"name": "someone-else"}]},
    }
    built["spec"]["schedulingGates"] = [{"name": pp.GATE}]
    assert pp.pin_patch(built, "a")["spec"]["schedulingGates"] is None  # the field removed
    assert pp.ungate_patch(built) == {"spec": {"schedulingGates": None}}


def test_only_elastic_torchrun_workers_requesting_the_resource_qualify() -> None:
    job = manifest()
    assert pp.qualifies(job, replica_type="Worker", resource=GPU)
    assert not pp.qualifies(job, replica_type="Worker", resource="x.io/tpu")
    assert not pp.qualifies(job, replica_type="Master", resource=GPU)
    assert not pp.qualifies(manifest(elasticPolicy=None), replica_type="Worker", resource=GPU)


@pytest.mark.parametrize(
    ("annotations", "labels", "metrics"),
    [
        ({"elastic-autoscaler.io/opt-out": "True"}, {}, None),
        ({}, {"kueue.x-k8s.io/queue-name": "q"}, None),
        (
            {},
            {},
            [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        ),
    ],
    ids=["opted out", "queued by Kueue", "sized by its HPA"],
)
def test_a_job_whose_count_another_owner_writes_is_left_to_the_scheduler(
    annotations: dict[str, str], labels: dict[str, str], metrics: Any
) -> None:
    job = elastic_job("j", replicas=2, low=1, high=4)
    job["metadata"] |= {"annotations": annotations, "labels": labels}
    job["spec"]["elasticPolicy"]["metrics"] = metrics
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"limits": {GPU: "1"}}
    built = default_job(PyTorchJob.model_validate(job))
    assert not pp.qualifies(built, replica_type="Worker", resource=GPU)
    job["metadata"] |= {"annotations": {}, "labels": {}}
    job["spec"]["elasticPolicy"]["metrics"] = None
    assert pp.qualifies(
        default_job(PyTorchJob.model_validate(job)), replica_type="Worker", resource=GPU
    )


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TERM = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": HOSTNAME}
NODE_TERM = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}


@pytest.mark.parametrize(
    ("field", "value", "left_to_the_scheduler"),
    [
        ("affinity", {"nodeAffinity": {REQUIRED: NODE_TERM}}, True),
        ("affinity", {"podAffinity": {REQUIRED: [TERM]}}, True),
        ("affinity", {"podAntiAffinity": {REQUIRED: [TERM]}}, True),
        (
            "affinity",
            {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": TERM}
                    ]
                }
            },
            False,
        ),
        (
            "topologySpreadConstraints",
            [{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule"}],
            True,
        ),
        (
            "topologySpreadConstraints",
            [{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway"}],
            False,
        ),
    ],
)
def test_workers_with_constraints_only_the_scheduler_reads_are_left_to_it(
    field: str, value: Any, left_to_the_scheduler: bool
) -> None:
    job = elastic_job("j", replicas=2, low=1, high=4)
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"limits": {GPU: "1"}}
    spec[field] = value
    built = default_job(PyTorchJob.model_validate(job))
    assert pp.qualifies(built, replica_type="Worker", resource=GPU) is not left_to_the_scheduler


def test_a_pin_the_scheduler_cannot_bind_is_undone_after_a_while() -> None:
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "lastTransitionTime": (NOW - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    stuck = pod(1, pinned="a") | {"status": {"phase": "Pending", "conditions": [condition]}}
    assert pp.unbindable_since(stuck, before=NOW - timedelta(seconds=30))
    assert not pp.unbindable_since(stuck, before=NOW - timedelta(seconds=90))
    assert not pp.unbindable_since(pod(1, node="a", pinned="a"), before=NOW)
    assert not pp.unbindable_since({**stuck, "metadata": {"name": "p"}}, before=NOW)


def test_a_job_is_placed_only_on_nodes_its_template_allows_and_not_while_workers_leave() -> None:
    gated = unit({0: None, 1: None})
    only_b = pp.Unit(gated.key, 1, 1, gated.workers, fits=lambda name: name == "b")
    decision = pp.place_unit(only_b, {"a": 4, "b": 2}, per_node=4)
    assert decision is not None
    assert set(decision.pins.values()) == {"b"}
    leaving = pp.Unit(gated.key, 1, 1, gated.workers, leaving=True)
    assert pp.place_unit(leaving, {"a": 4}, per_node=4) is None


TAINT = {"key": "gpu", "value": "a100", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ({}, False),  # the taint is not tolerated
        ({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, True),
        ({"tolerations": [{"key": "gpu", "value": "a100"}]}, True),
        ({"tolerations": [{"key": "gpu", "value": "h100"}]}, False),
        ({"tolerations": [{"operator": "Exists"}]}, True),
        ({"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]}, False),
        ({"tolerations": [{"operator": "Exists"}], "nodeSelector": {"pool": "big"}}, True),
        ({"tolerations": [{"operator": "Exists"}], "nodeSelector": {"pool": "small"}}, False),
    ],
)
def test_a_template_allows_nodes_by_its_node_selector_and_tolerations(
    spec: JSON, allowed: bool
) -> None:
    tainted = {"metadata": {"name": "a", "labels": {"pool": "big"}}, "spec": {"taints": [TAINT]}}
    assert pp.allows(spec, tainted) is allowed
    assert pp.allows(
        {},
        {"metadata": {"name": "b"}, "spec": {"taints": [{**TAINT, "effect": "PreferNoSchedule"}]}},
    )


def test_explain_counts_a_jobs_workers_by_node_waiting_for_room_and_unbound() -> None:
    pods = [
        pod(1, node="a"),
        pod(1, node="a"),
        pod(1, pinned="b"),  # pinned, not bound yet: it holds room on b
        pod(1, schedulingGates=[{"name": pp.GATE}]),  # held until it packs
        pod(1),  # left to kube-scheduler, not bound yet
        {**pod(1, node="c"), "status": {"phase": "Failed"}},  # done: not counted
        {
            **pod(1, node="c"),
            "metadata": {"name": "p", "deletionTimestamp": "2026-12-07T00:00:00Z"},
        },
    ]
    assert pp.worker_layout(pods) == {
        "nodes": {"a": 2, "b": 1},
        "waiting_for_room": 1,
        "unbound": 1,
    }
    assert pp.worker_layout([]) == {"nodes": {}, "waiting_for_room": 0, "unbound": 0}
