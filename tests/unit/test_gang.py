"""Gang scheduling, pure: the PodGroup, the pods' fields, the Volcano gate, the condition the
engine reads, and deletion when the job ends (upstream v1.9 and the elastic difference)."""

import copy
from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.api.quantity import exact_quantity, format_quantity
from autoscaler.clients.jobs import managed_job
from autoscaler.controller.builders import desired_objects, desired_pod
from autoscaler.controller.gang import (
    GangScheduler,
    desired_podgroup,
    gang_scheduler,
    min_member,
    min_resources,
    pods_may_start,
)
from autoscaler.controller.reconcile import plan
from autoscaler.controller.reconcile_pass import Observed, Plan
from autoscaler.engine.settle import running_count
from tests.support.clock import NOW
from tests.unit.test_reconcile import condition, job, pod, service

JSON = dict[str, Any]
VOLCANO, PLUGINS = GangScheduler("volcano"), GangScheduler("scheduler-plugins")
ADMITTED = {"metadata": {"name": "j", "resourceVersion": "7"}, "status": {"phase": "Inqueue"}}


def parsed(obj: JSON) -> PyTorchJob:
    return default_job(PyTorchJob.model_validate(obj))


def with_requests(obj: JSON, kind: str, resources: JSON, **pod_spec: Any) -> JSON:
    replica = obj["spec"]["pytorchReplicaSpecs"][kind]
    replica["template"] = copy.deepcopy(replica["template"])  # job() shares one template
    spec = replica["template"]["spec"]
    spec["containers"][0]["resources"] = resources
    spec.update(pod_spec)
    return obj


def created(result: Plan, kind: str) -> list[JSON]:
    return [obj for obj in result.create if obj["kind"] == kind]


def gang_condition(result: Plan) -> tuple[str, str]:
    assert result.status is not None
    found = [c for c in result.status["conditions"] if c["type"] == "GangScheduled"]
    return (found[0]["status"], found[0]["reason"]) if found else ("", "")


def bound(index: int, *, kind: str = "worker") -> JSON:
    placed = pod(index, "Running", kind=kind)
    return {**placed, "spec": {"nodeName": "node-0"}}


# -- the setting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "volcano", "scheduler_name", "api_version"),
    [
        ("volcano", True, "volcano", "scheduling.volcano.sh/v1beta1"),
        ("Volcano", True, "volcano", "scheduling.volcano.sh/v1beta1"),
        ("scheduler-plugins", False, "scheduler-plugins", "scheduling.x-k8s.io/v1alpha1"),
        ("my-coscheduler", False, "my-coscheduler", "scheduling.x-k8s.io/v1alpha1"),
    ],
)
def test_the_flag_picks_the_podgroup_api_and_the_pods_scheduler_as_upstream(
    flag: str, volcano: bool, scheduler_name: str, api_version: str
) -> None:
    gang = gang_scheduler(flag)
    assert gang is not None
    assert (gang.is_volcano, gang.scheduler_name, gang.api.api_version) == (
        volcano,
        scheduler_name,
        api_version,
    )


def test_no_flag_means_no_gang_scheduling() -> None:
    assert gang_scheduler("") is None
    assert gang_scheduler(None) is None


# -- the PodGroup ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "members"),
    [
        (job(replicas=3), 3),  # not elastic: every replica (upstream's total)
        (job(replicas=3, master=True), 4),
        (job(replicas=4, elastic={"minReplicas": 2, "maxReplicas": 6}), 2),  # the minimum
        (job(replicas=4, master=True, elastic={"minReplicas": 2, "maxReplicas": 6}), 3),
        (job(replicas=4, elastic={"maxReplicas": 6}), 6),  # min defaults to max
        (
            job(
                replicas=4,
                elastic={"minReplicas": 2, "maxReplicas": 6},
                run_policy={"schedulingPolicy": {"minAvailable": 5}},
            ),
            5,
        ),  # minAvailable wins, as upstream
    ],
)
def test_min_member(obj: JSON, members: int) -> None:
    assert min_member(parsed(obj)) == members


def test_min_resources_sum_the_first_members_pods_by_priority_then_master_first() -> None:
    obj = job(replicas=3, master=True)
    with_requests(obj, "Master", {"requests": {"cpu": "500m", "memory": "1Gi"}})
    with_requests(obj, "Worker", {"limits": {"cpu": "2", "memory": "512Mi"}})  # limits count
    assert min_resources(parsed(obj), members=2, priorities={}) == {
        "cpu": "2500m",
        "memory": "1536Mi",
    }
    with_requests(
        obj, "Worker", {"requests": {"cpu": "2"}}, priorityClassName="high"
    )  # workers first now
    assert min_resources(parsed(obj), members=2, priorities={"high": 1000}) == {"cpu": "4"}


def test_min_resources_from_the_scheduling_policy_are_taken_as_they_are() -> None:
    obj = job(run_policy={"schedulingPolicy": {"minResources": {"cpu": 3, "memory": "2Gi"}}})
    assert min_resources(parsed(obj), members=2, priorities={}) == {"cpu": 3, "memory": "2Gi"}


def test_quantities_add_exactly_and_print_as_apimachinery_does() -> None:
    total = sum((exact_quantity(q) for q in ("100m", "100m", "100m")), exact_quantity(0))
    assert format_quantity(total) == "300m"
    assert format_quantity(exact_quantity("1500")) == "1500"
    assert format_quantity(exact_quantity("2000")) == "2k"
    assert format_quantity(exact_quantity("3Gi"), binary=True) == "3Gi"


def test_volcano_podgroup_has_upstreams_fields_and_owner() -> None:
    obj = job(
        replicas=4,
        elastic={"minReplicas": 2, "maxReplicas": 6},
        run_policy={
            "schedulingPolicy": {
                "queue": "research",
                "priorityClass": "high",
                "scheduleTimeoutSeconds": 60,
            }
        },
    )
    obj["metadata"]["annotations"] = {"team": "vision"}
    with_requests(obj, "Worker", {"requests": {"nvidia.com/gpu": 1}})
    group = desired_podgroup(parsed(obj), VOLCANO, priorities={}, current=None)
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["kind"] == "PodGroup"
    assert group["metadata"]["name"] == "j"
    assert group["metadata"]["annotations"] == {"team": "vision"}
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert group["metadata"]["ownerReferences"][0]["controller"] is True
    # Volcano's PodGroup has no scheduleTimeoutSeconds: upstream does not set it there.
    assert group["spec"] == {
        "minMember": 2,
        "queue": "research",
        "priorityClassName": "high",
        "minResources": {"nvidia.com/gpu": "2"},
    }


def test_volcano_queue_defaults_to_default_and_an_existing_queue_stays() -> None:
    group = desired_podgroup(parsed(job()), VOLCANO, priorities={}, current=None)
    assert group["spec"]["queue"] == "default"
    current = {"spec": {"queue": "set-by-someone"}}
    kept = desired_podgroup(parsed(job()), VOLCANO, priorities={}, current=current)
    assert kept["spec"]["queue"] == "set-by-someone"


def test_scheduler_plugins_podgroup_has_min_member_resources_and_timeout() -> None:
    obj = job(
        replicas=2,
        run_policy={"schedulingPolicy": {"queue": "q", "scheduleTimeoutSeconds": 30}},
    )
    with_requests(obj, "Worker", {"requests": {"cpu": "1"}})
    group = desired_podgroup(parsed(obj), PLUGINS, priorities={}, current=None)
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"] == {
        "minMember": 2,
        "minResources": {"cpu": "2"},
        "scheduleTimeoutSeconds": 30,
    }


# -- the pods ----------------------------------------------------------------------------------


def test_volcano_pods_get_the_scheduler_and_the_group_and_task_annotations() -> None:
    made = desired_pod(parsed(job(master=True)), replica_type="Master", index=0, gang=VOLCANO)
    assert made["spec"]["schedulerName"] == "volcano"
    assert made["metadata"]["annotations"] == {
        "scheduling.k8s.io/group-name": "j",
        "volcano.sh/task-spec": "master",
    }


def test_scheduler_plugins_pods_get_the_scheduler_and_the_pod_group_label() -> None:
    made = desired_pod(parsed(job()), replica_type="Worker", index=1, gang=PLUGINS)
    assert made["spec"]["schedulerName"] == "scheduler-plugins"
    assert made["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "j"


def test_a_template_scheduler_is_kept_with_a_warning_event() -> None:
    obj = job()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "mine"
    made = desired_pod(parsed(obj), replica_type="Worker", index=0, gang=VOLCANO)
    assert made["spec"]["schedulerName"] == "mine"
    admitted = plan(obj, Observed(podgroup=ADMITTED), now=NOW, gang=VOLCANO)
    assert "SetPodTemplateSchedulerName" in [event.reason for event in admitted.events]


def test_render_shows_the_podgroup_first_and_decorated_pods() -> None:
    objects = desired_objects(parsed(job(replicas=2)), gang=PLUGINS)
    assert [obj["kind"] for obj in objects] == ["PodGroup", "Pod", "Service", "Pod", "Service"]
    assert all(o["spec"]["schedulerName"] == "scheduler-plugins" for o in objects[1::2])


# -- the plan ----------------------------------------------------------------------------------


def test_volcano_creates_the_podgroup_and_no_pod_until_it_is_admitted() -> None:
    first = plan(job(replicas=2), Observed(), now=NOW, gang=VOLCANO)
    assert [obj["kind"] for obj in first.create] == ["PodGroup"]
    assert gang_condition(first) == ("False", "PodGroupPending")
    pending = {**ADMITTED, "spec": first.create[0]["spec"], "status": {"phase": "Pending"}}
    waiting = plan(job(replicas=2), Observed(podgroup=pending), now=NOW, gang=VOLCANO)
    assert waiting.create == []
    assert waiting.update == []
    admitted = {**pending, "status": {"phase": "Inqueue"}}
    started = plan(job(replicas=2), Observed(podgroup=admitted), now=NOW, gang=VOLCANO)
    assert [obj["metadata"]["name"] for obj in created(started, "Pod")] == [
        "j-worker-0",
        "j-worker-1",
    ]
    assert gang_condition(started) == ("False", "GangPending")  # created, not placed yet


@pytest.mark.parametrize("phase", ["", "Pending"])
def test_the_volcano_gate_holds_while_the_phase_is_unset_or_pending(phase: str) -> None:
    assert not pods_may_start(VOLCANO, {"status": {"phase": phase}})
    assert not pods_may_start(VOLCANO, None)
    assert pods_may_start(VOLCANO, {"status": {"phase": "Running"}})


def test_scheduler_plugins_pods_are_created_with_the_podgroup() -> None:
    result = plan(job(replicas=2), Observed(), now=NOW, gang=PLUGINS)
    assert [obj["kind"] for obj in result.create] == [
        "PodGroup",
        "Pod",
        "Pod",
        "Service",
        "Service",
    ]


def test_the_gang_is_scheduled_once_its_minimum_is_bound() -> None:
    obj = job(replicas=3, elastic={"minReplicas": 2, "maxReplicas": 4})
    group = {
        **ADMITTED,
        "spec": desired_podgroup(parsed(obj), PLUGINS, priorities={}, current=None)["spec"],
    }
    one = Observed(pods=[bound(0), pod(1, "Pending"), pod(2, "Pending")], podgroup=group)
    assert gang_condition(plan(obj, one, now=NOW, gang=PLUGINS)) == ("False", "GangPending")
    two = Observed(pods=[bound(0), bound(1), pod(2, "Pending")], podgroup=group)
    assert gang_condition(plan(obj, two, now=NOW, gang=PLUGINS)) == ("True", "GangScheduled")


def test_the_podgroup_follows_the_minimum() -> None:
    obj = job(replicas=3, elastic={"minReplicas": 2, "maxReplicas": 4})
    spec = desired_podgroup(parsed(obj), PLUGINS, priorities={}, current=None)["spec"]
    group = {**ADMITTED, "spec": spec}
    assert plan(obj, Observed(podgroup=group), now=NOW, gang=PLUGINS).update == []
    obj["spec"]["elasticPolicy"]["minReplicas"] = 3
    (updated,) = plan(obj, Observed(podgroup=group), now=NOW, gang=PLUGINS).update
    assert updated["spec"]["minMember"] == 3
    assert updated["metadata"]["resourceVersion"] == "7"  # an update of what exists


def test_a_scale_up_is_not_held_by_the_gang() -> None:
    obj = job(replicas=4, elastic={"minReplicas": 2, "maxReplicas": 4})
    spec = desired_podgroup(parsed(obj), PLUGINS, priorities={}, current=None)["spec"]
    observed = Observed(
        pods=[bound(0), bound(1)],
        services=[service(0), service(1)],
        podgroup={**ADMITTED, "spec": spec},
    )
    result = plan(obj, observed, now=NOW, gang=PLUGINS)
    assert [o["metadata"]["name"] for o in created(result, "Pod")] == ["j-worker-2", "j-worker-3"]
    assert result.update == []  # minMember stays 2


def test_a_missing_crd_is_a_condition_and_one_warning_not_a_crash() -> None:
    result = plan(job(), Observed(podgroup_api_missing=True), now=NOW, gang=VOLCANO)
    assert result.create == []
    assert gang_condition(result) == ("False", "PodGroupCRDMissing")
    (event,) = [e for e in result.events if e.type == "Warning"]
    assert event.reason == "PodGroupCRDMissing"
    assert "scheduling.volcano.sh/v1beta1" in event.message
    again = job(status=result.status)
    repeat = plan(again, Observed(podgroup_api_missing=True), now=NOW, gang=VOLCANO)
    assert [e for e in repeat.events if e.type == "Warning"] == []


@pytest.mark.parametrize(
    ("run_policy", "conditions"),
    [
        ({}, [condition("Created"), condition("Succeeded")]),  # finished
        ({"suspend": True}, [condition("Created")]),  # suspended
        ({"backoffLimit": 0}, [condition("Created"), condition("Running")]),  # fails now
    ],
    ids=["finished", "suspended", "failed"],
)
def test_the_podgroup_is_deleted_when_the_job_ends_or_is_suspended(
    run_policy: JSON, conditions: list[JSON]
) -> None:
    obj = job(run_policy=run_policy, status={"conditions": conditions})
    observed = Observed(pods=[pod(0, "Failed")], podgroup=ADMITTED)
    result = plan(obj, observed, now=NOW, gang=VOLCANO)
    assert ("PodGroup", "j") in result.delete
    assert "JobTerminated" in [event.reason for event in result.events]


def test_without_the_flag_nothing_changes_and_a_stale_condition_goes() -> None:
    stale = {**condition("GangScheduled", "False", "GangPending")}
    obj = job(status={"conditions": [stale, condition("Created")]})
    result = plan(obj, Observed(), now=NOW)
    assert [o["kind"] for o in result.create] == ["Pod", "Pod", "Service", "Service"]
    assert gang_condition(result) == ("", "")
    assert all("schedulerName" not in o["spec"] for o in created(result, "Pod"))


# -- the engine's view -------------------------------------------------------------------------


def engine_job(active: int, *, gang: str | None) -> JSON:
    obj = job(replicas=3, elastic={"minReplicas": 2, "maxReplicas": 4})
    obj["metadata"]["creationTimestamp"] = "2026-11-29T11:00:00Z"
    conditions = [condition("Created")]
    if gang is not None:
        conditions.insert(0, condition("GangScheduled", gang, "GangPending"))
    obj["status"] = {"replicaStatuses": {"Worker": {"active": active}}, "conditions": conditions}
    return obj


@pytest.mark.parametrize(("quota", "waiting"), [("False", True), ("True", False)])
def test_the_engine_sees_a_scale_up_that_waits_for_kueue(quota: str, waiting: bool) -> None:
    """Only the admitted workers run (its running count, as for pods still pending)."""
    obj = engine_job(2, gang=None)
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    obj["status"]["conditions"].insert(0, condition("QuotaAdmitted", quota, "WorkloadSlicePending"))
    managed = managed_job(obj)
    assert managed is not None
    assert managed.quota_waiting is waiting
    assert running_count(managed) == 2


@pytest.mark.parametrize(
    ("active", "gang", "waiting", "running"),
    [
        (3, None, False, 3),  # no gang scheduling: as before
        (2, "True", False, 2),  # gang placed, one pod beyond it pending: runs at 2
        (2, "False", True, None),  # its gang is not placed: waiting, not running
        (0, "False", True, None),
    ],
)
def test_the_engine_counts_a_job_whose_gang_waits_as_waiting(
    active: int, gang: str | None, waiting: bool, running: int | None
) -> None:
    managed = managed_job(engine_job(active, gang=gang))
    assert managed is not None
    assert managed.gang_waiting is waiting
    assert running_count(managed) == running
