"""The pure reconcile plan, scenario by scenario (upstream v1.9's behaviour and the deliberate differences)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller.builders import desired_hpa
from autoscaler.controller.reconcile import Event, Observed, Plan, lifecycle, plan
from autoscaler.controller.status import is_subset

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STAMP = "2026-11-29T12:00:00Z"
UID = "uid-1"
JSON = dict[str, Any]


def job(
    *,
    replicas: int = 2,
    elastic: JSON | None = None,
    restart: str = "OnFailure",
    master: bool = False,
    run_policy: JSON | None = None,
    status: JSON | None = None,
) -> JSON:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "img"}]}}
    specs: JSON = {"Worker": {"replicas": replicas, "restartPolicy": restart, "template": template}}
    if master:
        specs["Master"] = {"replicas": 1, "restartPolicy": restart, "template": template}
    spec: JSON = {"pytorchReplicaSpecs": specs, "runPolicy": run_policy or {}}
    if elastic is not None:
        spec["elasticPolicy"] = elastic
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": UID},
        "spec": spec,
        "status": status or {},
    }


def pod(index: int, phase: str = "Running", *, kind: str = "worker", **extra: Any) -> JSON:
    labels = {
        "training.kubeflow.org/replica-type": kind,
        "training.kubeflow.org/replica-index": str(index),
    }
    status: JSON = {"phase": phase, **extra.pop("status", {})}
    return {"metadata": {"name": f"j-{kind}-{index}", "labels": labels, **extra}, "status": status}


def service(index: int, *, kind: str = "worker") -> JSON:
    return {k: v for k, v in pod(index, kind=kind).items() if k == "metadata"}


def running(n: int, **kwargs: Any) -> Observed:
    return Observed(
        pods=[pod(i) for i in range(n)], services=[service(i) for i in range(n)], **kwargs
    )


def condition(type_: str, status: str = "True", reason: str = "") -> JSON:
    reason = reason or f"PyTorchJob{type_}"
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "",
        "lastUpdateTime": STAMP,
        "lastTransitionTime": STAMP,
    }


def kinds(result: Plan) -> list[tuple[str, str]]:
    return [(obj["kind"], obj["metadata"]["name"]) for obj in result.create]


def types(result: Plan) -> list[tuple[str, str]]:
    assert result.status is not None
    return [(c["type"], c["status"]) for c in result.status["conditions"]]


def steady(j: JSON, observed: Observed) -> JSON:
    """The job with the status a first pass over `observed` writes."""
    first = plan(j, observed, now=NOW)
    return {**j, "status": first.status or j["status"]}


def test_new_job_gets_pods_services_hpa_and_created() -> None:
    result = plan(
        job(elastic={"minReplicas": 1, "maxReplicas": 3, "metrics": [{"type": "External"}]}),
        Observed(),
        now=NOW,
    )
    assert kinds(result) == [
        ("HorizontalPodAutoscaler", "j"),
        ("Pod", "j-worker-0"),
        ("Pod", "j-worker-1"),
        ("Service", "j-worker-0"),
        ("Service", "j-worker-1"),
    ]
    assert types(result) == [("Created", "True")]
    assert result.status is not None
    assert result.status["replicaStatuses"] == {
        "Worker": {
            "selector": "training.kubeflow.org/job-name=j,training.kubeflow.org/operator-name=pytorchjob-controller,training.kubeflow.org/replica-type=worker"
        }
    }


def test_steady_state_writes_nothing() -> None:
    observed = running(2)
    j = steady(job(elastic={}), observed)
    assert types(plan(job(elastic={}), observed, now=NOW)) == [
        ("Created", "True"),
        ("Running", "True"),
    ]
    assert plan(j, observed, now=NOW + timedelta(minutes=5)).writes == 0


def test_scale_down_removes_highest_index_without_failure() -> None:
    observed = running(3)
    j = steady(job(replicas=3, elastic={"minReplicas": 1, "maxReplicas": 3}), observed)
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    result = plan(j, observed, now=NOW)
    assert result.delete == [("Pod", "j-worker-2"), ("Service", "j-worker-2")]
    assert (result.create, result.events) == ([], [])
    assert result.status is not None
    assert result.status["replicaStatuses"]["Worker"].get("failed") is None


def test_terminating_scaled_down_pod_is_not_a_failure() -> None:
    """The pod a scale-down deleted still runs while it terminates."""
    observed = Observed(
        pods=[pod(0), pod(1), pod(2, deletionTimestamp=STAMP)], services=[service(0), service(1)]
    )
    j = steady(job(replicas=2, elastic={"minReplicas": 1, "maxReplicas": 3}), running(2))
    assert plan(j, observed, now=NOW).writes == 0


def test_scale_up_fills_missing_indices() -> None:
    observed = running(2)
    j = steady(job(replicas=2, elastic={"minReplicas": 1, "maxReplicas": 4}), observed)
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    assert kinds(plan(j, observed, now=NOW)) == [
        ("Pod", "j-worker-2"),
        ("Pod", "j-worker-3"),
        ("Service", "j-worker-2"),
        ("Service", "j-worker-3"),
    ]


def test_losing_worker_0_restarts_all_workers_once() -> None:
    """Worker-0 hosts the rendezvous store; the others cannot continue without it."""
    observed = Observed(
        pods=[pod(0, "Failed"), pod(1), pod(2)], services=[service(i) for i in range(3)]
    )
    j = steady(job(replicas=3, elastic={}), running(3))
    result = plan(j, observed, now=NOW)
    assert result.delete == [("Pod", "j-worker-0"), ("Pod", "j-worker-1"), ("Pod", "j-worker-2")]
    assert [e.reason for e in result.events] == ["PyTorchJobRestarting"]
    assert types(result)[-1] == ("Restarting", "True")
    # While the others terminate nothing is created, and no second restart is counted.
    gone = Observed(
        pods=[pod(1, deletionTimestamp=STAMP), pod(2, deletionTimestamp=STAMP)],
        services=observed.services,
    )
    again = plan({**j, "status": result.status}, gone, now=NOW)
    assert (again.create, again.delete, again.events) == ([], [], [])


@pytest.mark.parametrize(
    ("restart", "exit_code", "expect_delete", "expect_condition"),
    [
        ("OnFailure", 1, True, ("Restarting", "True")),
        ("ExitCode", 137, True, ("Restarting", "True")),
        ("ExitCode", 1, False, ("Failed", "True")),
        ("Never", 1, False, ("Failed", "True")),
    ],
)
def test_failed_worker_by_restart_policy(
    restart: str, exit_code: int, expect_delete: bool, expect_condition: tuple[str, str]
) -> None:
    terminated = {
        "containerStatuses": [{"name": "pytorch", "state": {"terminated": {"exitCode": exit_code}}}]
    }
    observed = Observed(
        pods=[pod(0), pod(1, "Failed", status=terminated)], services=[service(0), service(1)]
    )
    result = plan(steady(job(restart=restart), running(2)), observed, now=NOW)
    assert (("Pod", "j-worker-1") in result.delete) is expect_delete
    assert expect_condition in types(result)


def test_elastic_job_succeeds_when_any_worker_succeeds() -> None:
    observed = Observed(pods=[pod(0), pod(1, "Succeeded")], services=[service(0), service(1)])
    result = plan(steady(job(elastic={}), running(2)), observed, now=NOW)
    assert types(result)[-1] == ("Succeeded", "True")
    assert result.status is not None
    assert result.status["completionTime"] == STAMP


def test_master_success_completes_the_job() -> None:
    observed = Observed(pods=[pod(0, "Succeeded", kind="master"), pod(0), pod(1)], services=[])
    result = plan(
        job(master=True, status={"conditions": [condition("Created")]}), observed, now=NOW
    )
    assert types(result)[-1] == ("Succeeded", "True")


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("None", []),
        ("Running", [("Pod", "j-worker-0"), ("Service", "j-worker-0")]),
        (
            "All",
            [
                ("Pod", "j-worker-0"),
                ("Pod", "j-worker-1"),
                ("Service", "j-worker-0"),
                ("Service", "j-worker-1"),
            ],
        ),
    ],
)
def test_clean_pod_policy_after_success(policy: str, deleted: list[tuple[str, str]]) -> None:
    observed = Observed(pods=[pod(0), pod(1, "Succeeded")], services=[service(0), service(1)])
    status = {"conditions": [condition("Created"), condition("Succeeded")], "completionTime": STAMP}
    result = plan(job(run_policy={"cleanPodPolicy": policy}, status=status), observed, now=NOW)
    assert result.delete == deleted


@pytest.mark.parametrize(
    ("elapsed", "delete_job", "requeue"), [(30, False, 30.0), (60, True, None)]
)
def test_ttl_after_finished(elapsed: int, delete_job: bool, requeue: float | None) -> None:
    completed = (NOW - timedelta(seconds=elapsed)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"conditions": [condition("Succeeded")], "completionTime": completed}
    result = plan(
        job(run_policy={"ttlSecondsAfterFinished": 60}, status=status), Observed(), now=NOW
    )
    assert (result.delete_job, result.requeue_after) == (delete_job, requeue)


def test_suspend_removes_services_whose_pods_are_already_gone() -> None:
    observed = Observed(pods=[pod(0)], services=[service(0), service(1)])
    result = plan(job(run_policy={"suspend": True}), observed, now=NOW)
    assert result.delete == [
        ("Pod", "j-worker-0"),
        ("Service", "j-worker-0"),
        ("Service", "j-worker-1"),
    ]


def test_suspend_then_resume() -> None:
    metrics = {"metrics": [{"type": "External"}]}
    j = steady(job(elastic=metrics), running(2))
    hpa = desired_hpa_for(j)
    j["spec"]["runPolicy"]["suspend"] = True
    suspended = plan(j, running(2, hpa=hpa), now=NOW)
    assert ("HorizontalPodAutoscaler", "j") in suspended.delete
    assert {("Pod", "j-worker-0"), ("Service", "j-worker-1")} <= set(suspended.delete)
    assert types(suspended) == [("Created", "True"), ("Running", "False"), ("Suspended", "True")]
    later = NOW + timedelta(hours=1)
    j = {**j, "status": suspended.status}
    j["spec"]["runPolicy"]["suspend"] = False
    resumed = plan(j, Observed(), now=later)
    assert types(resumed) == [("Created", "True"), ("Running", "False"), ("Suspended", "False")]
    assert resumed.status is not None
    assert resumed.status["startTime"] == later.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ("HorizontalPodAutoscaler", "j") in kinds(resumed)


def desired_hpa_for(j: JSON) -> JSON:
    hpa = desired_hpa(default_job(PyTorchJob.model_validate(j)))
    assert hpa is not None
    hpa["metadata"]["resourceVersion"] = "7"
    return hpa


def test_hpa_follows_the_policy_and_is_removed_with_metrics() -> None:
    j = steady(job(elastic={"maxReplicas": 3, "metrics": [{"type": "External"}]}), running(2))
    hpa = desired_hpa_for(j)
    assert plan(j, running(2, hpa=hpa), now=NOW).writes == 0
    j["spec"]["elasticPolicy"]["maxReplicas"] = 4
    updated = plan(j, running(2, hpa=hpa), now=NOW)
    assert [
        (u["spec"]["maxReplicas"], u["metadata"]["resourceVersion"]) for u in updated.update
    ] == [(4, "7")]
    del j["spec"]["elasticPolicy"]["metrics"]
    assert plan(j, running(2, hpa=hpa), now=NOW).delete == [("HorizontalPodAutoscaler", "j")]


def test_foreign_hpa_is_left_alone_with_condition_and_event() -> None:
    j = steady(job(elastic={"metrics": [{"type": "External"}]}), running(2))
    foreign = {"metadata": {"name": "j", "ownerReferences": []}, "spec": {}}
    result = plan(j, running(2, hpa=foreign), now=NOW)
    assert (result.create, result.update, result.delete) == ([], [], [])
    assert types(result)[0] == ("HorizontalPodAutoscaler", "False")
    assert types(result)[-1] == ("Running", "True")  # the State column is still the lifecycle
    assert [e.reason for e in result.events] == ["HPANotOwned"]
    again = plan({**j, "status": result.status}, running(2, hpa=foreign), now=NOW)
    assert again.writes == 0


def test_backoff_limit_fails_the_job_and_removes_pods() -> None:
    restarted = {"containerStatuses": [{"name": "pytorch", "restartCount": 3}]}
    observed = Observed(pods=[pod(0, status=restarted), pod(1)], services=[service(0), service(1)])
    result = plan(steady(job(run_policy={"backoffLimit": 3}), running(2)), observed, now=NOW)
    assert set(result.delete) == {
        ("Pod", "j-worker-0"),
        ("Pod", "j-worker-1"),
        ("Service", "j-worker-0"),
        ("Service", "j-worker-1"),
    }
    assert types(result)[-1] == ("Failed", "True")
    assert result.status is not None
    assert (
        result.status["conditions"][-1]["message"]
        == "Job j has failed because it has reached the specified backoff limit"
    )


@pytest.mark.parametrize(("elapsed", "failed"), [(59, False), (60, True)])
def test_active_deadline(elapsed: int, failed: bool) -> None:
    j = steady(job(run_policy={"activeDeadlineSeconds": 60}), running(2))
    result = plan(j, running(2), now=NOW + timedelta(seconds=elapsed))
    assert (result.status is not None and ("Failed", "True") in types(result)) is failed
    assert (result.requeue_after == 1.0) is not failed


def test_job_managed_elsewhere_is_never_touched() -> None:
    result = plan(job(run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}), Observed(), now=NOW)
    assert result.writes == 0


def test_replica_status_counts() -> None:
    observed = Observed(
        pods=[
            pod(0),
            pod(1, "Pending"),
            pod(2, "Failed"),
            pod(3, "Running", deletionTimestamp=STAMP),
        ]
    )
    result = plan(job(replicas=4, restart="Never"), observed, now=NOW)
    assert result.status is not None
    counts = result.status["replicaStatuses"]["Worker"]
    assert (counts.get("active"), counts.get("failed"), counts.get("succeeded")) == (1, 2, None)


def test_is_subset_ignores_server_defaults() -> None:
    assert is_subset({"a": 1, "b": [{"c": 2}]}, {"a": 1, "b": [{"c": 2, "d": 3}], "e": 4})
    assert not is_subset({"a": 1}, {"a": 2})
    assert not is_subset({"b": [1]}, {"b": [1, 2]})


def test_template_restart_policy_is_overwritten_with_a_warning() -> None:
    j = job(restart="ExitCode", elastic={"nProcPerNode": 2})
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["restartPolicy"] = "Always"
    result = plan(j, Observed(), now=NOW)
    pods = [obj for obj in result.create if obj["kind"] == "Pod"]
    assert {pod["spec"]["restartPolicy"] for pod in pods} == {"Never"}  # ExitCode is the operator's
    assert [e.reason for e in result.events] == [
        "DeprecatedField",
        "SetPodTemplateRestartPolicy",
        "SetPodTemplateRestartPolicy",
    ]


# -- upstream's Events, counters and comparisons ------------------------------------------------


def terminated_status(code: int, *, container: str = "pytorch", run: str = "docker://a") -> JSON:
    state = {"terminated": {"exitCode": code, "containerID": run}}
    return {"containerStatuses": [{"name": container, "state": state, "restartCount": 0}]}


def waiting_status(reason: str, *, restarts: int = 0, container: str = "pytorch") -> JSON:
    state = {"waiting": {"reason": reason, "message": f"{reason} for img"}}
    return {"containerStatuses": [{"name": container, "state": state, "restartCount": restarts}]}


def events_of(result: Plan) -> list[tuple[str, str, str | None]]:
    return [(e.type, e.reason, e.once) for e in result.events]


@pytest.mark.parametrize(
    ("phase", "status", "expected"),
    [
        # upstream's ExitedWithCode: every terminated `pytorch` container, whatever the phase
        (
            "Succeeded",
            terminated_status(0),
            [("Normal", "ExitedWithCode", "p1/pytorch/docker://a")],
        ),
        ("Running", terminated_status(1), [("Normal", "ExitedWithCode", "p1/pytorch/docker://a")]),
        ("Running", terminated_status(0, container="sidecar"), []),  # not the training container
        (
            "Running",
            waiting_status("ImagePullBackOff"),
            [("Warning", "ImagePullBackOff", "p1/pytorch/ImagePullBackOff/0")],
        ),
        (
            "Running",
            waiting_status("CrashLoopBackOff", restarts=3),
            [("Warning", "CrashLoopBackOff", "p1/pytorch/CrashLoopBackOff/3")],
        ),
        (
            "Pending",
            waiting_status("CreateContainerConfigError", container="init"),
            [("Warning", "CreateContainerConfigError", "p1/init/CreateContainerConfigError/0")],
        ),
        ("Pending", waiting_status("ContainerCreating"), []),  # on its way: nothing to report
    ],
)
def test_container_events(phase: str, status: JSON, expected: list[tuple[str, str, str]]) -> None:
    observed = Observed(
        pods=[pod(0), pod(1, phase, status=status, uid="p1")], services=[service(0), service(1)]
    )
    result = plan(steady(job(replicas=2, restart="Never"), running(2)), observed, now=NOW)
    container = [e for e in events_of(result) if e[1] not in ("PyTorchJobFailed",)]
    assert container == expected


def test_exited_with_code_names_the_pod_and_the_code() -> None:
    observed = Observed(
        pods=[pod(0, "Succeeded", status=terminated_status(3), uid="p0")], services=[service(0)]
    )
    result = plan(steady(job(replicas=1), running(1)), observed, now=NOW)
    exited = [e for e in result.events if e.reason == "ExitedWithCode"]
    assert [e.message for e in exited] == ["Pod: None.j-worker-0 exited with code 3"]


def test_a_non_retryable_exit_fails_the_job_with_upstreams_warning() -> None:
    observed = Observed(
        pods=[pod(0), pod(1, "Failed", status=terminated_status(1), uid="p1")],
        services=[service(0), service(1)],
    )
    result = plan(steady(job(restart="ExitCode"), running(2)), observed, now=NOW)
    failed = [e for e in result.events if e.reason == "PyTorchJobFailed"]
    assert [(e.type, e.message) for e in failed] == [
        ("Warning", 'job "j" is failing because "Worker" replica(s) failed.')
    ]
    assert "failed" in result.lifecycle


@pytest.mark.parametrize(
    ("before", "after", "restarts", "expected"),
    [
        ([], ["Created"], 0, ["created"]),
        (["Created"], ["Created", "Running"], 0, []),
        (["Created", "Running"], ["Created", "Succeeded"], 0, ["successful"]),
        (["Created", "Running"], ["Created", "Failed"], 0, ["failed"]),
        (["Created", "Failed"], ["Created", "Failed"], 0, []),  # already counted
        (["Created", "Running"], ["Created", "Restarting"], 2, ["restarted", "restarted"]),
    ],
)
def test_upstream_job_counters_move_on_transitions(
    before: list[str], after: list[str], restarts: int, expected: list[str]
) -> None:
    restart = Event("Warning", "PyTorchJobRestarting", "restarting")
    assert (
        lifecycle(
            [condition(t) for t in before], [condition(t) for t in after], [restart] * restarts
        )
        == expected
    )


def test_a_new_job_counts_as_created_once() -> None:
    first = plan(job(), Observed(), now=NOW)
    assert first.lifecycle == ["created"]
    again = plan({**job(), "status": first.status}, Observed(), now=NOW)
    assert again.lifecycle == []


@pytest.mark.parametrize(
    ("desired", "stored", "rewritten"),
    [
        ("1000m", "1", False),  # the API server's canonical form of the same quantity
        ("0.5", "500m", False),
        ("300m", "0.3", False),
        ("1", "2", True),
    ],
)
def test_hpa_targets_are_compared_by_value(desired: str, stored: str, rewritten: bool) -> None:
    metric = {
        "type": "External",
        "external": {
            "metric": {"name": "m"},
            "target": {"type": "AverageValue", "averageValue": desired},
        },
    }
    elastic = {"minReplicas": 1, "maxReplicas": 4, "metrics": [metric]}
    j = job(elastic=elastic)
    hpa = desired_hpa(default_job(PyTorchJob.model_validate(j)))
    assert hpa is not None
    hpa["spec"]["metrics"][0]["external"]["target"]["averageValue"] = stored
    hpa["metadata"]["ownerReferences"][0]["uid"] = UID
    result = plan(steady(j, running(2, hpa=hpa)), running(2, hpa=hpa), now=NOW)
    assert bool(result.update) is rewritten
