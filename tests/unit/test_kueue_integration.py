"""The operator's own Kueue integration as a table: (job, Workloads) -> writes."""

from typing import Any

import pytest

from autoscaler import fault_tolerance
from autoscaler.api import coordinates as c
from autoscaler.controller import kueue, kueue_step, kueue_templates, kueue_workload
from autoscaler.controller.kueue_runtime import kueue_capped, with_queued_workers
from autoscaler.controller.reconcile import plan
from autoscaler.controller.reconcile_pass import Observed
from tests.support.clock import NOW

JSON = dict[str, Any]
FLAVOR = {
    "metadata": {"name": "pool-a"},
    "spec": {
        "nodeLabels": {"pool": "a"},
        "tolerations": [{"key": "reserved", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


def job(
    *,
    workers: int = 2,
    suspend: bool | None = True,
    elastic: bool = False,
    master: bool = False,
    labels: dict[str, str] | None = None,
    status: JSON | None = None,
    template: JSON | None = None,
) -> JSON:
    specs: JSON = {
        c.WORKER: {
            "replicas": workers,
            "template": template or {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
        }
    }
    if master:
        specs[c.MASTER] = {
            "replicas": 1,
            "template": {
                "spec": {
                    "containers": [{"name": "pytorch", "image": "x"}],
                    "priorityClassName": "high",
                }
            },
        }
    obj: JSON = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {
            "name": "train",
            "namespace": "team",
            "uid": "u-1",
            "generation": 3,
            "labels": {c.LABEL_KUEUE_QUEUE_NAME: "q", **(labels or {})},
            "annotations": {kueue.ANNOTATION_ELASTIC: "true"} if elastic else {},
        },
        "spec": {"pytorchReplicaSpecs": specs, "runPolicy": {}},
    }
    if suspend is not None:
        obj["spec"]["runPolicy"]["suspend"] = suspend
    if status is not None:
        obj["status"] = status
    return obj


def workload(
    *,
    name: str = "wl",
    workers: int = 2,
    admitted: bool = False,
    evicted: str | None = None,
    replaces: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> JSON:
    conditions = []
    obj: JSON = {
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "annotations": {kueue.ANNOTATION_REPLACEMENT_FOR: replaces} if replaces else {},
        },
        "spec": {
            "podSets": [
                {"name": "worker", "count": workers, "template": {"spec": {"containers": []}}}
            ]
        },
        "status": {},
    }
    if admitted:
        conditions += [
            {"type": kueue.QUOTA_RESERVED, "status": "True"},
            {"type": kueue.ADMITTED, "status": "True"},
        ]
        obj["status"]["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "worker", "count": workers, "flavors": {"nvidia.com/gpu": "pool-a"}}
            ],
        }
    if evicted:
        conditions.append({"type": kueue.EVICTED, "status": "True", "reason": evicted})
    obj["status"]["conditions"] = conditions
    return obj


def step(job_: JSON, *workloads: JSON, **queued: Any) -> kueue_step.Step:
    observed = kueue_workload.Queued(
        workloads=list(workloads), flavors={"pool-a": FLAVOR}, priorities={"high": 100}, **queued
    )
    return kueue_step.step(job_, observed, now=NOW)


def test_an_unlabelled_job_is_none_of_its_business() -> None:
    unlabelled = job(suspend=False)
    del unlabelled["metadata"]["labels"][c.LABEL_KUEUE_QUEUE_NAME]
    assert step(unlabelled) == kueue_step.Step()


def test_a_new_job_is_suspended_before_anything_else() -> None:
    result = step(job(suspend=None))
    assert result.holds
    assert result.job is not None
    assert result.job["spec"]["runPolicy"]["suspend"] is True
    assert result.create == []


def test_a_suspended_job_gets_one_workload_per_replica_type_with_its_priority() -> None:
    result = step(job(master=True))
    [created] = result.create
    assert created["spec"]["queueName"] == "q"
    assert [(ps["name"], ps["count"]) for ps in created["spec"]["podSets"]] == [
        ("master", 1),
        ("worker", 2),
    ]
    assert created["spec"]["priority"] == 100
    assert created["spec"]["priorityClassRef"] == {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": "high",
    }
    assert created["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert created["metadata"]["labels"] == {kueue.LABEL_JOB_UID: "u-1"}
    assert not result.holds


def test_a_torchft_jobs_lighthouse_counts_in_its_workload() -> None:
    torchft_job = job(elastic=True)
    torchft_job["metadata"]["annotations"][fault_tolerance.ANNOTATION] = fault_tolerance.TORCHFT
    torchft_job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 4}
    [created] = step(torchft_job).create
    lighthouse = created["spec"]["podSets"][-1]
    assert (lighthouse["name"], lighthouse["count"]) == ("lighthouse", 1)
    [container] = lighthouse["template"]["spec"]["containers"]
    assert container["resources"] == {"requests": {"cpu": "50m", "memory": "256Mi"}}
    assert kueue_workload.wanted(torchft_job) == {"worker": 2, "lighthouse": 1}


def test_a_workload_priority_class_label_wins() -> None:
    labelled = job(master=True, labels={kueue.LABEL_PRIORITY_CLASS: "urgent"})
    [created] = step(labelled, workload_priorities={"urgent": 7}).create
    assert created["spec"]["priority"] == 7
    assert created["spec"]["priorityClassRef"]["kind"] == "WorkloadPriorityClass"


def test_a_pending_workload_follows_the_spec_and_no_pod_runs() -> None:
    result = step(job(workers=3), workload(workers=2))
    assert [ps["count"] for ps in result.update[0]["spec"]["podSets"]] == [3]
    assert result.admitted == {}


def test_admission_starts_the_job_with_the_flavour_merged_in() -> None:
    result = step(job(), workload(admitted=True))
    assert result.job is not None
    assert result.job["spec"]["runPolicy"]["suspend"] is False
    pod = result.job["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "a"}
    assert pod["tolerations"] == FLAVOR["spec"]["tolerations"]
    assert ("Normal", "Started", "Admitted by clusterQueue cq") in result.events


def test_an_unknown_flavour_holds_the_start_with_a_warning() -> None:
    observed = kueue_workload.Queued(workloads=[workload(admitted=True)])
    result = kueue_step.step(job(), observed, now=NOW)
    assert result.job is None
    assert result.events[0][:2] == ("Warning", "FlavorNotFound")


def test_a_running_admitted_job_runs_at_its_admitted_counts() -> None:
    result = step(job(suspend=False), workload(admitted=True))
    assert result == kueue_step.Step(admitted={c.WORKER: 2})


def test_eviction_stops_the_job_and_restores_its_templates() -> None:
    started = kueue_templates.started(job(), workload(admitted=True), {"pool-a": FLAVOR})
    result = step(started, workload(admitted=True, evicted=kueue.PREEMPTED))
    assert result.job is not None
    pod = result.job["spec"]["pytorchReplicaSpecs"][c.WORKER]["template"]["spec"]
    assert result.job["spec"]["runPolicy"]["suspend"] is True
    assert "nodeSelector" not in pod
    assert "tolerations" not in pod
    assert result.status == []


@pytest.mark.parametrize(
    ("reason", "requeued"), [(kueue.PREEMPTED, "True"), ("ClusterQueueStopped", "False")]
)
def test_the_quota_goes_back_once_no_pod_is_active(reason: str, requeued: str) -> None:
    evicted = workload(admitted=True, evicted=reason)
    active = job(status={"replicaStatuses": {c.WORKER: {"active": 2}}})
    assert step(active, evicted).status == []
    [written] = step(job(status={"replicaStatuses": {c.WORKER: {}}}), evicted).status
    assert "admission" not in written["status"]
    states = {cond["type"]: cond["status"] for cond in written["status"]["conditions"]}
    assert states[kueue.QUOTA_RESERVED] == "False"
    assert states[kueue.ADMITTED] == "False"
    assert states[kueue.REQUEUED] == requeued


def test_an_evicted_workload_waiting_again_gets_no_second_one() -> None:
    waiting = workload(evicted=kueue.PREEMPTED)
    assert step(job(), waiting) == kueue_step.Step(admitted={})


def test_a_finished_job_finishes_its_workload() -> None:
    done = job(
        suspend=False,
        status={"conditions": [{"type": "Succeeded", "status": "True", "message": "ok"}]},
    )
    [written] = step(done, workload(admitted=True)).status
    finished = written["status"]["conditions"][-1]
    assert (finished["type"], finished["status"], finished["reason"]) == (
        kueue.FINISHED,
        "True",
        "Succeeded",
    )


def test_a_resized_job_that_is_not_elastic_is_stopped_and_queued_again() -> None:
    result = step(job(workers=3, suspend=False), workload(admitted=True))
    assert result.job is not None
    assert result.job["spec"]["runPolicy"]["suspend"] is True
    assert result.delete == ["wl"]


def test_an_elastic_scale_up_is_a_new_slice_and_waits_at_the_admitted_count() -> None:
    result = step(job(workers=3, suspend=False, elastic=True), workload(admitted=True))
    [new_slice] = result.create
    assert new_slice["metadata"]["annotations"] == {
        kueue.ANNOTATION_ELASTIC: "true",
        kueue.ANNOTATION_REPLACEMENT_FOR: "team/wl",
    }
    assert [ps["count"] for ps in new_slice["spec"]["podSets"]] == [3]
    assert new_slice["metadata"]["name"] != kueue_workload.workload_name(job())
    assert result.admitted == {c.WORKER: 2}
    assert result.job is None


def test_a_pending_slice_follows_the_spec_and_goes_when_it_is_scaled_back() -> None:
    old = workload(admitted=True)
    pending = workload(name="new", workers=3, replaces="team/wl", created="2026-01-01T00:01:00Z")
    grown = step(job(workers=4, suspend=False, elastic=True), old, pending)
    assert [ps["count"] for ps in grown.update[0]["spec"]["podSets"]] == [4]
    back = step(job(workers=2, suspend=False, elastic=True), old, pending)
    assert back.delete == ["new"]


def test_an_admitted_slice_replaces_the_old_one() -> None:
    old = workload(admitted=True)
    new = workload(
        name="new", workers=3, admitted=True, replaces="team/wl", created="2026-01-01T00:01:00Z"
    )
    assert kueue.chain([old, new]) == (new, None)
    result = step(job(workers=3, suspend=False, elastic=True), old, new)
    assert result == kueue_step.Step(admitted={c.WORKER: 3})


def test_an_elastic_scale_down_shrinks_the_admitted_workload_in_place() -> None:
    result = step(job(workers=1, suspend=False, elastic=True), workload(admitted=True))
    [shrunk] = result.update
    assert [ps["count"] for ps in shrunk["spec"]["podSets"]] == [1]
    assert result.admitted == {c.WORKER: 1}
    assert result.create == []


@pytest.mark.parametrize(
    ("admitted", "condition"), [({c.WORKER: 2}, "False"), ({c.WORKER: 4}, None)]
)
def test_a_queued_scale_up_shows_on_the_job(
    admitted: dict[str, int], condition: str | None
) -> None:
    running = job(workers=4, suspend=False, elastic=True)
    observed = with_queued_workers(Observed(), running, admitted)
    planned = plan(kueue_capped(running, admitted), observed, now=NOW)
    conditions = (planned.status or {}).get("conditions") or []
    found = next((x for x in conditions if x["type"] == c.CONDITION_QUOTA_ADMITTED), None)
    assert (found or {}).get("status") == condition
    if found is not None:
        assert found["message"] == (
            "the scale-up to 4 workers waits for Kueue to admit its Workload slice"
        )


def test_kueues_finalizer_comes_off_a_finished_workload_taken_over_from_kueue() -> None:
    finished = workload(admitted=True)
    finished["metadata"]["finalizers"] = [kueue.FINALIZER, "other"]
    finished["status"]["conditions"].append({"type": kueue.FINISHED, "status": "True"})
    done = job(status={"conditions": [{"type": "Succeeded", "status": "True"}]})
    [released] = step(done, finished).update
    assert released["metadata"]["finalizers"] == ["other"]
    running = workload(admitted=True)
    running["metadata"]["finalizers"] = [kueue.FINALIZER]
    assert step(job(suspend=False), running).update == []


def test_the_pod_planner_sees_no_more_replicas_than_admitted() -> None:
    capped = kueue_capped(job(workers=4, master=True), {c.WORKER: 2, c.MASTER: 1})
    specs = capped["spec"]["pytorchReplicaSpecs"]
    assert (specs[c.WORKER]["replicas"], specs[c.MASTER]["replicas"]) == (2, 1)
    assert (
        kueue_capped(job(workers=1), {c.WORKER: 3})["spec"]["pytorchReplicaSpecs"][c.WORKER][
            "replicas"
        ]
        == 1
    )
