"""torchft mode in the reconcile plan and the pod builders: the lighthouse, the workers' env,
restarts of workers whose lighthouse was lost, and the validation of the annotation."""

from typing import Any

import pytest

from autoscaler import fault_tolerance as ft
from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller import torchft
from autoscaler.controller.builders import desired_pod
from autoscaler.controller.conditions import FAULT_TOLERANCE
from autoscaler.controller.reconcile import plan
from autoscaler.controller.reconcile_pass import Observed, Plan
from tests.support.clock import NOW
from tests.unit.test_reconcile import UID, condition, job, pod, service

JSON = dict[str, Any]
ELASTIC = {"minReplicas": 1, "maxReplicas": 4}
LIGHTHOUSE_UID = "lighthouse-uid-1"


def ft_job(replicas: int = 2, *, annotations: JSON | None = None, **kwargs: Any) -> JSON:
    manifest = job(replicas=replicas, elastic=kwargs.pop("elastic", ELASTIC), **kwargs)
    container = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    container["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456}]
    manifest["metadata"]["annotations"] = annotations or {ft.ANNOTATION: ft.TORCHFT}
    manifest["status"] = manifest["status"] or {"conditions": [condition("Created")]}
    return manifest


def lighthouse(phase: str = "Running", uid: str = LIGHTHOUSE_UID, **extra: Any) -> JSON:
    labels = {"training.kubeflow.org/replica-type": "lighthouse"}
    return {
        "metadata": {"name": "j-lighthouse", "uid": uid, "labels": labels, **extra},
        "status": {"phase": phase},
    }


def lighthouse_service() -> JSON:
    return {k: v for k, v in lighthouse().items() if k == "metadata"}


def worker(index: int, phase: str = "Running", *, joined: str | None = LIGHTHOUSE_UID) -> JSON:
    annotations = {} if joined is None else {torchft.ANNOTATION_LIGHTHOUSE_UID: joined}
    return pod(index, phase, annotations=annotations)


def parsed(manifest: JSON) -> PyTorchJob:
    return default_job(PyTorchJob.model_validate(manifest))


def created(result: Plan, kind: str) -> list[str]:
    return [obj["metadata"]["name"] for obj in result.create if obj["kind"] == kind]


def test_a_new_job_gets_its_lighthouse_before_any_worker() -> None:
    result = plan(ft_job(), Observed(), now=NOW)
    assert created(result, "Pod") == ["j-lighthouse"]
    assert created(result, "Service") == ["j-lighthouse", "j-worker-0", "j-worker-1"]


def test_workers_join_the_live_lighthouse_with_its_uid() -> None:
    observed = Observed(pods=[lighthouse("Pending")], services=[lighthouse_service()])
    result = plan(ft_job(), observed, now=NOW)
    pods = [obj for obj in result.create if obj["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == ["j-worker-0", "j-worker-1"]
    for p in pods:
        assert p["metadata"]["annotations"][torchft.ANNOTATION_LIGHTHOUSE_UID] == LIGHTHOUSE_UID


def test_steady_torchft_job_writes_nothing_but_counts_its_lighthouse() -> None:
    observed = Observed(
        pods=[lighthouse(), worker(0), worker(1)],
        services=[lighthouse_service(), service(0), service(1)],
    )
    result = plan(ft_job(), observed, now=NOW)
    assert (result.create, result.delete) == ([], [])
    assert result.status is not None
    assert result.status["replicaStatuses"]["Lighthouse"] == {"active": 1}
    assert result.status["replicaStatuses"]["Worker"]["active"] == 2


def test_losing_worker_0_restarts_nobody_else() -> None:
    observed = Observed(
        pods=[lighthouse(), worker(1), worker(2)],
        services=[lighthouse_service(), *map(service, range(3))],
    )
    result = plan(ft_job(3), observed, now=NOW)
    assert result.delete == []
    assert created(result, "Pod") == ["j-worker-0"]


def test_a_failed_worker_is_replaced_alone() -> None:
    observed = Observed(
        pods=[lighthouse(), worker(0), worker(1, "Failed")],
        services=[lighthouse_service(), service(0), service(1)],
    )
    result = plan(ft_job(), observed, now=NOW)
    assert result.delete == [("Pod", "j-worker-1")]


@pytest.mark.parametrize(
    ("lighthouse_pods", "deleted"),
    [
        pytest.param(
            [lighthouse("Failed")],
            [("Pod", "j-lighthouse"), ("Pod", "j-worker-0"), ("Pod", "j-worker-1")],
            id="lighthouse-failed",
        ),
        pytest.param([], [("Pod", "j-worker-0"), ("Pod", "j-worker-1")], id="lighthouse-deleted"),
        pytest.param(
            [lighthouse(uid="lighthouse-uid-2")],
            [("Pod", "j-worker-0"), ("Pod", "j-worker-1")],
            id="lighthouse-replaced",
        ),
    ],
)
def test_workers_of_a_lost_lighthouse_restart(
    lighthouse_pods: list[JSON], deleted: list[tuple[str, str]]
) -> None:
    observed = Observed(
        pods=[*lighthouse_pods, worker(0), worker(1)],
        services=[lighthouse_service(), service(0), service(1)],
    )
    result = plan(ft_job(), observed, now=NOW)
    assert sorted(result.delete) == sorted(deleted)
    assert created(result, "Pod") == ([] if lighthouse_pods else ["j-lighthouse"])
    assert "PyTorchJobRestarting" in [event.reason for event in result.events]
    assert result.lifecycle.count("restarted") == 1


def test_a_terminating_lighthouse_is_waited_for_before_its_name_is_reused() -> None:
    gone = lighthouse("Running", deletionTimestamp="2026-11-29T11:59:00Z")
    observed = Observed(pods=[gone], services=[lighthouse_service()])
    result = plan(ft_job(), observed, now=NOW)
    assert created(result, "Pod") == []


@pytest.mark.parametrize("clean_pod_policy", ["None", "Running", "All"])
def test_a_finished_job_removes_its_lighthouse_whatever_the_clean_pod_policy(
    clean_pod_policy: str,
) -> None:
    done = {"conditions": [condition("Created"), condition("Succeeded")]}
    manifest = ft_job(run_policy={"cleanPodPolicy": clean_pod_policy}, status=done)
    observed = Observed(pods=[lighthouse()], services=[lighthouse_service()])
    result = plan(manifest, observed, now=NOW)
    assert sorted(result.delete) == [("Pod", "j-lighthouse"), ("Service", "j-lighthouse")]


def test_suspending_removes_the_lighthouse_too() -> None:
    manifest = ft_job(run_policy={"suspend": True})
    observed = Observed(pods=[lighthouse(), worker(0)], services=[lighthouse_service(), service(0)])
    result = plan(manifest, observed, now=NOW)
    assert ("Pod", "j-lighthouse") in result.delete
    assert ("Service", "j-lighthouse") in result.delete


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"annotations": {ft.ANNOTATION: "yes"}}, 'must be "torchft", not "yes"'),
        ({"elastic": None}, "needs spec.elasticPolicy"),
        ({"master": True}, "needs a job without a Master"),
        (
            {"annotations": {ft.ANNOTATION: ft.TORCHFT, ft.ANNOTATION_HEARTBEAT_TIMEOUT: "0"}},
            "must be a positive number of milliseconds",
        ),
    ],
)
def test_invalid_fault_tolerance_is_a_condition_and_a_warning_and_creates_nothing(
    change: JSON, message: str
) -> None:
    manifest = ft_job(**change)
    result = plan(manifest, Observed(), now=NOW)
    assert [obj["kind"] for obj in result.create] == []
    warnings = [e for e in result.events if e.reason == "InvalidFaultTolerance"]
    assert len(warnings) == 1
    assert message in warnings[0].message
    assert result.status is not None
    (cond,) = [c for c in result.status["conditions"] if c["type"] == FAULT_TOLERANCE]
    assert (cond["status"], cond["reason"]) == ("False", "InvalidFaultTolerance")
    again = plan({**manifest, "status": result.status}, Observed(), now=NOW)
    assert again.events == []  # one Warning per change, not per pass


def test_fixing_the_annotation_clears_the_condition() -> None:
    bad = ft_job(annotations={ft.ANNOTATION: "yes"})
    status = plan(bad, Observed(), now=NOW).status
    fixed = plan({**ft_job(), "status": status}, Observed(), now=NOW)
    assert fixed.status is not None
    assert FAULT_TOLERANCE not in [c["type"] for c in fixed.status["conditions"]]
    assert created(fixed, "Pod") == ["j-lighthouse"]


def env(pod_json: JSON) -> dict[str, Any]:
    (container,) = pod_json["spec"]["containers"]
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in container["env"]}


def test_a_worker_gets_torchfts_environment_and_no_torchrun_rendezvous() -> None:
    pod_json = desired_pod(
        parsed(ft_job()), replica_type="Worker", index=3, lighthouse_uid=LIGHTHOUSE_UID
    )
    pod_ip = {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env(pod_json) == {
        "PYTHONUNBUFFERED": "1",
        "TORCHFT_LIGHTHOUSE": "http://j-lighthouse:29510",
        "REPLICA_GROUP_ID": "3",
        "TORCHFT_MIN_REPLICAS": "1",
        "POD_IP": pod_ip,
        "MASTER_ADDR": pod_ip,
        "MASTER_PORT": "23456",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "TORCHFT_TIMEOUT_SEC": str(ft.DEFAULT_TIMEOUT_SECONDS),
        "JOB_ID": "ns/j",
    }


def test_the_lighthouse_runs_the_worker_image_with_the_jobs_minimum_and_timeouts() -> None:
    annotations = {ft.ANNOTATION: ft.TORCHFT, ft.ANNOTATION_HEARTBEAT_TIMEOUT: "3000"}
    manifest = ft_job(annotations=annotations, elastic={"minReplicas": 2, "maxReplicas": 4})
    template = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    template["nodeSelector"] = {"pool": "train"}
    template["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    pod_json = torchft.desired_lighthouse_pod(parsed(manifest))
    (container,) = pod_json["spec"]["containers"]
    assert container["image"] == "img"
    assert container["command"] == [
        "torchft_lighthouse",
        "--bind=[::]:29510",
        "--min_replicas=2",
        "--heartbeat_timeout_ms=3000",
        f"--join_timeout_ms={ft.DEFAULT_JOIN_TIMEOUT_MS}",
        f"--quorum_tick_ms={ft.DEFAULT_QUORUM_TICK_MS}",
    ]
    assert "nvidia.com/gpu" not in str(container["resources"])  # it needs no accelerator
    assert pod_json["spec"]["nodeSelector"] == {"pool": "train"}
    assert pod_json["spec"]["restartPolicy"] == "Never"
    assert pod_json["metadata"]["ownerReferences"][0]["uid"] == UID


def test_a_worker_keeps_the_torchft_timeout_its_template_sets() -> None:
    manifest = ft_job()
    container = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    container["containers"][0]["env"] = [{"name": "TORCHFT_TIMEOUT_SEC", "value": "30"}]
    pod_json = desired_pod(parsed(manifest), replica_type="Worker", index=0)
    (container_json,) = pod_json["spec"]["containers"]
    timeouts = [var for var in container_json["env"] if var["name"] == "TORCHFT_TIMEOUT_SEC"]
    assert timeouts == [{"name": "TORCHFT_TIMEOUT_SEC", "value": "30"}]
