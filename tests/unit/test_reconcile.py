"""The pure reconcile plan, scenario by scenario (upstream v1.9's behaviour and the deliberate differences).

Ported from the Kubeflow training operator v1.9, each case naming its source (`<file>: <case>`)
in its pytest id, or in its docstring when it is a single test: every case of
`pkg/controller.v1/common/job_test.go`, `pod_test.go`, `service_test.go` and `status_test.go`,
and of `pkg/util/status_test.go` (conditions) and `pkg/util/train/train_util_test.go`
(`TestIsRetryableExitCode`), except these, which cannot apply:

| upstream case | why not here |
| --- | --- |
| job_test.go: TestManagedByExternalController: managedBy is empty | the CRD's enum rejects `""` at admission (`tests/support/jobs.py` managed-by-empty): the operator never sees it |
| job_test.go: TestManagedByExternalController: managedBy is other value | likewise (managed-by-unknown) |
| pod_test.go: TestIsCustomSchedulerSet | ported in `tests/unit/test_gang.py` (`test_a_template_scheduler_is_kept_with_a_warning_event`): with gang scheduling on, a template's own `schedulerName` is kept with upstream's Warning |
| train_util_test.go: TestIsJobSuspended | a Go nil-pointer helper: `runPolicy.suspend` is a boolean defaulted to false here (suspend cases below) |

`pod_test.go` `TestSetRestartPolicy` and `util_test.go` `TestGenGeneralName` are ported in
`tests/unit/test_builders.py`. Upstream's `pkg/core` has no tests of its own in v1.9: its
functions are tested through the `common` tests above.
"""

from datetime import timedelta
from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller.builders import desired_hpa
from autoscaler.controller.conditions import Condition, has_condition, is_finished, set_condition
from autoscaler.controller.reconcile import lifecycle, plan
from autoscaler.controller.reconcile_pass import Event, Observed, Plan
from autoscaler.controller.status import count_replicas, is_subset
from tests.support.clock import NOW
from tests.support.jobs import webhook_master_worker

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


def placed(*nodes: str | None, terminating: tuple[int, ...] = ()) -> Observed:
    """Workers 0.. of an elastic job on `nodes` (None: pending), each with its service; those at
    `terminating` being deleted."""
    pods = []
    for index, node in enumerate(nodes):
        extra = {"deletionTimestamp": STAMP} if index in terminating else {}
        worker = pod(index, "Running" if node else "Pending", **extra)
        pods.append({**worker, "spec": {"nodeName": node} if node else {}})
    return Observed(pods=pods, services=[service(i) for i in range(len(nodes))])


def elastic_at(observed: Observed, replicas: int, *, master: bool = False) -> JSON:
    """An elastic job steady over `observed`, its count then set to `replicas`."""
    live = len([p for p in observed.pods if "deletionTimestamp" not in p["metadata"]])
    elastic = {"minReplicas": 1, "maxReplicas": 8}
    j = steady(job(replicas=live, elastic=elastic, master=master), observed)
    j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    return j


def deleted(result: Plan, kind: str = "Pod") -> list[int]:
    return sorted(int(name.rsplit("-", 1)[1]) for k, name in result.delete if k == kind)


@pytest.mark.parametrize(
    ("nodes", "replicas", "gone"),
    [
        pytest.param(("a", "a", "a", "a"), 2, [2, 3], id="one node: the highest indices go"),
        pytest.param(("a", "b", "a", "a"), 3, [1], id="the least-filled node's worker goes"),
        pytest.param(("a", "b", "b", "a", "a", "c"), 3, [1, 2, 5], id="nodes emptied in turn"),
        pytest.param(("a", "a", None, "b"), 3, [2], id="a pending worker goes first"),
        pytest.param(("a", "b", "b", "b"), 2, [2, 3], id="worker-0 stays on its emptiest node"),
        pytest.param(("a", "b", "b", "a"), 2, [1, 2], id="worker-0's node is emptied last"),
        pytest.param(("a", "a", "b", "b"), 3, [3], id="a tie goes to the highest index"),
    ],
)
def test_an_elastic_scale_down_empties_the_least_filled_nodes_first(
    nodes: tuple[str | None, ...], replicas: int, gone: list[int]
) -> None:
    """Workers on the nodes holding the fewest of the job's workers go, so the rest stay packed;
    each goes with its service, and none counts as a failure."""
    observed = placed(*nodes)
    result = plan(elastic_at(observed, replicas), observed, now=NOW)
    assert (deleted(result), deleted(result, "Service")) == (gone, gone)
    assert (result.create, result.events, result.failed_pods) == ([], [], [])


def test_a_failed_elastic_worker_goes_first_and_is_not_restarted() -> None:
    """A failed worker holds no place on its node: a scale-down removes it before any worker
    that trains, and does not restart the job for it."""
    observed = placed("a", "a", "b", "a")
    observed.pods[1]["status"]["phase"] = "Failed"
    result = plan(elastic_at(observed, 3), observed, now=NOW)
    assert (deleted(result), deleted(result, "Service")) == ([1], [1])
    assert [event.reason for event in result.events] == []
    assert result.status is not None
    assert result.status["conditions"][-1]["type"] != "Restarting"


def test_an_elastic_scale_up_fills_the_lowest_free_indices() -> None:
    """Workers 0, 2 and 3 remain after a scale-down took worker-1: a scale-up to 5 adds 1 and 4."""
    observed = Observed(
        pods=[{**pod(i), "spec": {"nodeName": "a"}} for i in (0, 2, 3)],
        services=[service(i) for i in (0, 2, 3)],
    )
    result = plan(elastic_at(observed, 5), observed, now=NOW)
    assert kinds(result) == [
        ("Pod", "j-worker-1"),
        ("Pod", "j-worker-4"),
        ("Service", "j-worker-1"),
        ("Service", "j-worker-4"),
    ]
    assert result.delete == []


def test_an_elastic_worker_being_deleted_leaves_the_rest_as_they_are() -> None:
    """After a scale-down deleted worker-1, its pod still terminating: nothing more is written.
    At the same count with worker-1 being restarted, the pod comes back at its own index."""
    observed = placed("a", "b", "a", terminating=(1,))
    scaled_down = Observed(pods=observed.pods, services=[service(0), service(2)])
    assert plan(elastic_at(observed, 2), scaled_down, now=NOW).writes == 0
    restarting = plan(elastic_at(observed, 3), observed, now=NOW)
    assert (restarting.create, restarting.delete) == ([], [])
    gone = Observed(pods=[p for p in observed.pods if p["metadata"]["name"] != "j-worker-1"])
    assert kinds(plan(elastic_at(observed, 3), gone, now=NOW))[0] == ("Pod", "j-worker-1")


def test_workers_ranked_beside_a_master_keep_upstreams_highest_index_first() -> None:
    """Beside a Master each worker's rank is its index + 1, so its indices stay contiguous."""
    observed = placed("a", "b", "a", "a")
    observed.pods.append(pod(0, kind="master"))
    observed.services.append(service(0, kind="master"))
    result = plan(elastic_at(observed, 3, master=True), observed, now=NOW)
    assert deleted(result) == [3]


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


RETRYABLE_TEST = "train_util_test.go: TestIsRetryableExitCode"
RESTARTED, FAILED = ("Restarting", "True"), ("Failed", "True")


@pytest.mark.parametrize(
    ("restart", "exit_code", "expect_delete", "expect_condition"),
    [
        pytest.param("OnFailure", 1, True, RESTARTED, id="OnFailure, exit 1"),
        pytest.param("ExitCode", 137, True, RESTARTED, id="ExitCode, exit 137"),
        pytest.param("Never", 1, False, FAILED, id="Never, exit 1"),
        # Upstream's table of ExitCode judgements: codes from 128 (signals) are retried.
        pytest.param("ExitCode", 1, False, FAILED, id=f"{RETRYABLE_TEST}: ExitCode 1"),
        pytest.param("ExitCode", 2, False, FAILED, id=f"{RETRYABLE_TEST}: ExitCode 2"),
        pytest.param("ExitCode", 3, False, FAILED, id=f"{RETRYABLE_TEST}: ExitCode 3"),
        pytest.param("ExitCode", 130, True, RESTARTED, id=f"{RETRYABLE_TEST}: ExitCode 130"),
        pytest.param("ExitCode", 138, True, RESTARTED, id=f"{RETRYABLE_TEST}: ExitCode 138"),
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


def test_a_failure_under_restart_policy_never_fails_the_job_with_upstreams_event() -> None:
    """Upstream's status update records `PyTorchJobFailed` (Normal) as it sets the condition."""
    observed = Observed(
        pods=[pod(0), pod(1, "Failed", status=terminated_status(1), uid="p1")],
        services=[service(0), service(1)],
    )
    result = plan(steady(job(restart="Never"), running(2)), observed, now=NOW)
    message = "PyTorchJob j is failed because 1 Worker replica(s) failed."
    failed = [(e.type, e.message) for e in result.events if e.reason == "PyTorchJobFailed"]
    assert failed == [("Normal", message)]
    again = plan({**job(restart="Never"), "status": result.status}, observed, now=NOW)
    assert not [e for e in again.events if e.reason == "PyTorchJobFailed"]  # finished: no repeat


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


CLEANUP_TEST = "job_test.go: TestDeletePodsAndServices"
EVERYTHING = [
    ("Pod", "j-worker-0"),
    ("Pod", "j-worker-1"),
    ("Service", "j-worker-0"),
    ("Service", "j-worker-1"),
]


@pytest.mark.parametrize(
    ("policy", "state", "deleted"),
    [
        pytest.param(
            "Running",
            "Succeeded",
            [("Pod", "j-worker-0"), ("Service", "j-worker-0")],
            id=f"{CLEANUP_TEST}: Succeeded job and cleanPodPolicy is Running",
        ),
        pytest.param(
            "Running",
            "Suspended",
            EVERYTHING,
            id=f"{CLEANUP_TEST}: Suspended job and cleanPodPolicy is Running",
        ),
        pytest.param(
            "All",
            "Succeeded",
            EVERYTHING,
            id=f"{CLEANUP_TEST}: Finished job and cleanPodPolicy is All",
        ),
        pytest.param(
            "None", "Failed", [], id=f"{CLEANUP_TEST}: Finished job and cleanPodPolicy is None"
        ),
        pytest.param(
            "None",
            "Suspended",
            EVERYTHING,
            id=f"{CLEANUP_TEST}: Suspended job and cleanPodPolicy is None",
        ),
        pytest.param("None", "Succeeded", [], id="Succeeded job and cleanPodPolicy is None"),
    ],
)
def test_clean_pod_policy(policy: str, state: str, deleted: list[tuple[str, str]]) -> None:
    """A running worker-0 and a succeeded worker-1, as upstream's running and succeeded pods.

    Upstream's function reads suspension from the Suspended condition; here the spec's
    `suspend` drives it (the condition follows), so a suspended case sets both."""
    observed = Observed(pods=[pod(0), pod(1, "Succeeded")], services=[service(0), service(1)])
    run_policy: JSON = {"cleanPodPolicy": policy, "suspend": state == "Suspended"}
    status: JSON = {"conditions": [condition("Created"), condition(state)]}
    if state != "Suspended":
        status["completionTime"] = STAMP
    result = plan(job(run_policy=run_policy, status=status), observed, now=NOW)
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
    assert [event.reason for event in suspended.events] == ["PyTorchJobSuspended"]
    again = plan({**j, "status": suspended.status}, Observed(), now=NOW)
    assert (again.events, again.writes) == ([], 0)  # one Event per suspension, not per pass
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


EVERYTHING = {
    ("Pod", "j-worker-0"),
    ("Pod", "j-worker-1"),
    ("Service", "j-worker-0"),
    ("Service", "j-worker-1"),
}


@pytest.mark.parametrize(
    ("clean_pod_policy", "deleted"),
    [(None, set()), ("None", set()), ("Running", EVERYTHING), ("All", EVERYTHING)],
)
def test_backoff_limit_fails_the_job_then_cleans_up_as_its_policy_says(
    clean_pod_policy: str | None, deleted: set[tuple[str, str]]
) -> None:
    """Upstream v1.9.4 fails the job before cleaning up, so `cleanPodPolicy` holds (v1.9.3
    deleted every pod)."""
    restarted = {"containerStatuses": [{"name": "pytorch", "restartCount": 3}]}
    observed = Observed(pods=[pod(0, status=restarted), pod(1)], services=[service(0), service(1)])
    policy = {"backoffLimit": 3, "cleanPodPolicy": clean_pod_policy}
    result = plan(steady(job(run_policy=policy), running(2)), observed, now=NOW)
    assert set(result.delete) == deleted
    assert types(result)[-1] == ("Failed", "True")
    assert result.status is not None
    assert (
        result.status["conditions"][-1]["message"]
        == "Job j has failed because it has reached the specified backoff limit"
    )


DEADLINE_TEST = "job_test.go: TestPastActiveDeadline"


@pytest.mark.parametrize(
    ("deadline", "elapsed", "failed"),
    [
        pytest.param(0, 0, True, id=f"{DEADLINE_TEST}: activeDeadlineSeconds is 0"),
        pytest.param(2, 0, False, id=f"{DEADLINE_TEST}: activeDeadlineSeconds is 2"),
        pytest.param(60, 59, False, id="60 s, 59 s after the start"),
        pytest.param(60, 60, True, id="60 s, 60 s after the start"),
    ],
)
def test_active_deadline(deadline: int, elapsed: int, failed: bool) -> None:
    """Started at NOW; a job within its deadline is requeued for the moment it runs out."""
    status = {"conditions": [condition("Created"), condition("Running")], "startTime": STAMP}
    j = job(run_policy={"activeDeadlineSeconds": deadline}, status=status)
    result = plan(j, running(2), now=NOW + timedelta(seconds=elapsed))
    assert (result.status is not None and ("Failed", "True") in types(result)) is failed
    assert (result.requeue_after == deadline - elapsed) is not failed


MANAGED_TEST = "job_test.go: TestManagedByExternalController"


@pytest.mark.parametrize(
    ("managed_by", "reconciled"),
    [
        pytest.param(None, True, id=f"{MANAGED_TEST}: managedBy is nil"),
        pytest.param(
            "kubeflow.org/training-operator",
            True,
            id=f"{MANAGED_TEST}: managedBy is training-operator controller",
        ),
        pytest.param(
            "kueue.x-k8s.io/multikueue",
            False,
            id=f"{MANAGED_TEST}: managedBy is not the training-operator controller",
        ),
    ],
)
def test_only_jobs_managed_by_this_operator_are_touched(
    managed_by: str | None, reconciled: bool
) -> None:
    run_policy = {} if managed_by is None else {"managedBy": managed_by}
    result = plan(job(run_policy=run_policy), Observed(), now=NOW)
    assert (result.writes > 0) is reconciled


BACKOFF_TEST = "job_test.go: TestPastBackoffLimit"
RESTARTED_3_TIMES = {"containerStatuses": [{"name": "pytorch", "restartCount": 3}]}


@pytest.mark.parametrize(
    ("limit", "pods", "failed"),
    [
        pytest.param(
            0, [pod(0), pod(1, "Succeeded")], False, id=f"{BACKOFF_TEST}: backOffLimit is 0"
        ),
        pytest.param(
            3,
            [pod(0), pod(1, "Succeeded"), pod(2, status=RESTARTED_3_TIMES)],
            True,
            id=f"{BACKOFF_TEST}: backOffLimit is 3",
        ),
    ],
)
def test_past_backoff_limit(limit: int, pods: list[JSON], failed: bool) -> None:
    """Upstream's pods (running, succeeded, running with 3 restarts) under OnFailure."""
    observed = Observed(pods=pods, services=[service(i) for i in range(len(pods))])
    result = plan(job(replicas=len(pods), run_policy={"backoffLimit": limit}), observed, now=NOW)
    assert (("Failed", "True") in types(result)) is failed


SLICE_TESTS = {
    "Pod": "pod_test.go: TestCalculatePodSliceSize",
    "Service": "service_test.go: TestCalculateServiceSliceSize",
}
# Upstream's unnamed cases, numbered in its order: (label, observed indices, replicas,
# indices created, indices deleted). Upstream sizes its slots max(replicas, highest index + 1);
# what that decides is which objects are created and which removed.
SLICE_CASES = [
    ("case 1 (indices 0-2, 3 replicas)", [0, 1, 2], 3, [], []),
    ("case 2 (indices 0-2, 4 replicas)", [0, 1, 2], 4, [3], []),
    ("case 3 (indices 0-2, 2 replicas)", [0, 1, 2], 2, [], [2]),
    ("case 4 (indices 0-2 and 4, 3 replicas)", [0, 1, 2, 4], 3, [], [4]),
]


@pytest.mark.parametrize(
    ("kind", "indices", "replicas", "created", "deleted"),
    [
        pytest.param(kind, *case[1:], id=f"{test} {case[0]}")
        for kind, test in SLICE_TESTS.items()
        for case in SLICE_CASES
    ],
)
def test_slots_cover_the_replicas_and_every_observed_index(
    kind: str, indices: list[int], replicas: int, created: list[int], deleted: list[int]
) -> None:
    """Objects of `kind` at `indices`, the other kind complete for `replicas`."""
    complete = range(replicas)
    observed = Observed(
        pods=[pod(i) for i in (indices if kind == "Pod" else complete)],
        services=[service(i) for i in (indices if kind == "Service" else complete)],
    )
    result = plan(job(replicas=replicas), observed, now=NOW)
    assert [name for k, name in kinds(result) if k == kind] == [f"j-worker-{i}" for i in created]
    assert [name for k, name in result.delete if k == kind] == [f"j-worker-{i}" for i in deleted]


def test_pods_and_services_are_told_apart_by_replica_type() -> None:
    """pod_test.go: TestFilterPodsForReplicaType; service_test.go: TestFilterServicesForReplicaType.

    Upstream picks a type's objects by the replica-type label. Here a Master+Worker job's pods
    and services come interleaved with those of a type the job does not have: each type's are
    counted and matched to its slots, the foreign ones left alone."""
    pods = [pod(0), pod(0, kind="master"), pod(0, kind="evaluator"), pod(1)]
    services = [service(0), service(0, kind="master"), service(0, kind="evaluator"), service(1)]
    result = plan(job(master=True), Observed(pods=pods, services=services), now=NOW)
    assert (result.create, result.delete) == ([], [])
    assert result.status is not None
    counts = {
        replica_type: {key: value for key, value in counts.items() if key != "selector"}
        for replica_type, counts in result.status["replicaStatuses"].items()
    }
    assert counts == {"Master": {"active": 1}, "Worker": {"active": 2}}


def test_terminating_running_pods_count_as_failed() -> None:
    """status_test.go: TestUpdateJobReplicaStatuses. 2 failed, 3 succeeded, 1 running and 1
    running pod being deleted: the deleted one counts as failed."""
    terminating = pod(0, deletionTimestamp=STAMP)
    pods = [pod(0, "Failed")] * 2 + [pod(0, "Succeeded")] * 3 + [pod(0), terminating]
    assert count_replicas(pods) == {"active": 1, "succeeded": 3, "failed": 3}


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


def terminated_status(
    code: int, *, container: str = "pytorch", run: str = "docker://a", reason: str = "Error"
) -> JSON:
    state = {"terminated": {"exitCode": code, "reason": reason, "containerID": run}}
    return {"containerStatuses": [{"name": container, "state": state, "restartCount": 0}]}


def waiting_status(
    reason: str, *, restarts: int = 0, container: str = "pytorch", message: str | None = None
) -> JSON:
    waiting = {"reason": reason, "message": f"{reason} for img" if message is None else message}
    state = {"waiting": waiting}
    return {"containerStatuses": [{"name": container, "state": state, "restartCount": restarts}]}


def init_waiting_status(reason: str) -> JSON:
    """An init container stuck, the app container waiting behind it (as the kubelet shows it)."""
    init = waiting_status(reason, container="init")["containerStatuses"]
    app = waiting_status("PodInitializing", message="")["containerStatuses"]
    return {"initContainerStatuses": init, "containerStatuses": app}


def pod_conditions(*conditions: tuple[str, str, str, str]) -> JSON:
    """(type, status, reason, lastTransitionTime) each; no container statuses yet."""
    return {
        "conditions": [
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": f"{reason} here",
                "lastTransitionTime": since,
            }
            for type_, status, reason, since in conditions
        ]
    }


EARLIER, LATER = "2026-11-29T11:00:00Z", "2026-11-29T11:30:00Z"
UNSCHEDULABLE = ("PodScheduled", "False", "Unschedulable", EARLIER)


def events_of(result: Plan) -> list[tuple[str, str, str | None]]:
    return [(e.type, e.reason, e.once) for e in result.events]


EXITED = ("Normal", "ExitedWithCode", "p1/pytorch/docker://a")


@pytest.mark.parametrize(
    ("phase", "status", "extra", "expected"),
    [
        # upstream's ExitedWithCode: every terminated `pytorch` container, whatever the phase
        ("Succeeded", terminated_status(0, reason="Completed"), {}, [EXITED]),
        # upstream's RecordAbnormalPods: a non-zero exit is a Warning with the kubelet's reason
        (
            "Running",
            terminated_status(1),
            {},
            [("Warning", "Error", "p1/pytorch/docker://a/exit"), EXITED],
        ),
        ("Running", terminated_status(0, container="sidecar"), {}, []),
        (
            "Running",
            terminated_status(137, container="sidecar", reason="OOMKilled"),
            {},
            [("Warning", "OOMKilled", "p1/sidecar/docker://a/exit")],
        ),
        (  # not upstream (it looks at active pods only): a failed pod says why it failed
            "Failed",
            terminated_status(137, reason="OOMKilled"),
            {},
            [("Warning", "OOMKilled", "p1/pytorch/docker://a/exit"), EXITED],
        ),
        (  # a pod being deleted is stopped by the deletion: not abnormal
            "Running",
            terminated_status(143),
            {"deletionTimestamp": STAMP},
            [EXITED],
        ),
        # any container waiting with a message, one Warning per restart
        (
            "Running",
            waiting_status("ImagePullBackOff"),
            {},
            [("Warning", "ImagePullBackOff", "p1/pytorch/ImagePullBackOff/0")],
        ),
        (
            "Running",
            waiting_status("CrashLoopBackOff", restarts=3),
            {},
            [("Warning", "CrashLoopBackOff", "p1/pytorch/CrashLoopBackOff/3")],
        ),
        (
            "Pending",
            init_waiting_status("CreateContainerConfigError"),
            {},
            [("Warning", "CreateContainerConfigError", "p1/init/CreateContainerConfigError/0")],
        ),
        (
            "Pending",
            waiting_status("SomeFutureReason"),
            {},
            [("Warning", "SomeFutureReason", "p1/pytorch/SomeFutureReason/0")],
        ),
        ("Pending", waiting_status("ContainerCreating", message=""), {}, []),  # on its way
        # no container statuses: the latest condition, when it is not True
        (
            "Pending",
            pod_conditions(UNSCHEDULABLE),
            {},
            [("Warning", "Unschedulable", f"p1/PodScheduled/False/Unschedulable/{EARLIER}")],
        ),
        (
            "Pending",
            pod_conditions(UNSCHEDULABLE, ("Initialized", "True", "", LATER)),
            {},
            [],
        ),
        (
            "Pending",
            pod_conditions(
                ("Initialized", "True", "", EARLIER), ("PodScheduled", *UNSCHEDULABLE[1:3], LATER)
            ),
            {},
            [("Warning", "Unschedulable", f"p1/PodScheduled/False/Unschedulable/{LATER}")],
        ),
        (  # container statuses, when there are any, say more than the pod's conditions
            "Pending",
            {
                **waiting_status("ContainerCreating", message=""),
                **pod_conditions(("Ready", "False", "ContainersNotReady", LATER)),
            },
            {},
            [],
        ),
        ("Failed", pod_conditions(("Ready", "False", "PodFailed", LATER)), {}, []),
    ],
)
def test_container_events(
    phase: str, status: JSON, extra: JSON, expected: list[tuple[str, str, str]]
) -> None:
    observed = Observed(
        pods=[pod(0), pod(1, phase, status=status, uid="p1", **extra)],
        services=[service(0), service(1)],
    )
    result = plan(steady(job(replicas=2, restart="Never"), running(2)), observed, now=NOW)
    container = [e for e in events_of(result) if e[1] not in ("PyTorchJobFailed",)]
    assert container == expected


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            terminated_status(137, reason="OOMKilled"),
            "Error pod j-worker-0 container pytorch exitCode: 137 terminated message: ",
        ),
        (
            waiting_status("ErrImagePull", message='pull "img": not found'),
            'Error pod j-worker-0 container pytorch waiting message: pull "img": not found',
        ),
        (
            pod_conditions(UNSCHEDULABLE),
            "Error pod j-worker-0 condition message: Unschedulable here",
        ),
    ],
    ids=["terminated", "waiting", "condition"],
)
def test_abnormal_pod_warnings_use_upstreams_wording(status: JSON, message: str) -> None:
    observed = Observed(pods=[pod(0, status=status, uid="p0")], services=[service(0)])
    result = plan(steady(job(replicas=1), running(1)), observed, now=NOW)
    assert [e.message for e in result.events if e.type == "Warning"] == [message]


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


# -- upstream's condition rules (`pkg/util/status_test.go`) --------------------------------------

STATUS_TEST = "status_test.go"


@pytest.mark.parametrize(
    ("type_", "finished"),
    [
        pytest.param("Succeeded", True, id=f"{STATUS_TEST}: TestIsFinished: Succeeded job"),
        pytest.param("Failed", True, id=f"{STATUS_TEST}: TestIsFinished: Failed job"),
        pytest.param("Suspended", False, id=f"{STATUS_TEST}: TestIsFinished: Suspended job"),
    ],
)
def test_is_finished(type_: str, finished: bool) -> None:
    assert is_finished([condition(type_)]) is finished


@pytest.mark.parametrize(
    "type_",
    [
        pytest.param("Succeeded", id=f"{STATUS_TEST}: TestIsSucceeded"),
        pytest.param("Failed", id=f"{STATUS_TEST}: TestIsFailed"),
        pytest.param("Running", id=f"{STATUS_TEST}: TestIsRunning"),
        pytest.param("Suspended", id=f"{STATUS_TEST}: TestIsSuspended"),
    ],
)
def test_a_condition_holds_only_while_true(type_: str) -> None:
    assert has_condition([condition(type_)], type_)
    assert not has_condition([condition(type_, "False")], type_)


def test_conditions_follow_upstreams_update_rules() -> None:
    """status_test.go: TestUpdateJobConditions. Running and Restarting replace each other in
    place; Failed is appended and turns Running False."""
    conditions: list[JSON] = []

    def update(type_: str, reason: str) -> list[tuple[str, str, str, str]]:
        nonlocal conditions
        new = Condition(type=type_, status="True", reason=reason, message=reason)
        conditions = set_condition(conditions, new, now=NOW)
        return [(c["type"], c["status"], c["reason"], c["message"]) for c in conditions]

    created = ("Created", "True", "Job Created", "Job Created")
    running = ("Running", "True", "Job Running", "Job Running")
    restarting = ("Restarting", "True", "Job Restarting", "Job Restarting")
    assert update("Created", "Job Created") == [created]
    assert update("Running", "Job Running") == [created, running]
    assert update("Restarting", "Job Restarting") == [created, restarting]
    assert update("Running", "Job Running") == [created, running]
    assert update("Failed", "Job Failed") == [
        created,
        ("Running", "False", "Job Running", "Job Running"),
        ("Failed", "True", "Job Failed", "Job Failed"),
    ]


def test_deprecated_nproc_per_node_gets_upstreams_warning_as_an_event() -> None:
    """pytorchjob_webhook_test.go: Spec.ElasticPolicy.NProcPerNode are set. Upstream's webhook
    warns at admission; a CRD cannot, so the job gets a Warning Event with upstream's text."""
    raw = webhook_master_worker(elasticPolicy={"nProcPerNode": 1})
    raw["metadata"].update(namespace="ns", uid=UID)
    result = plan(raw, Observed(), now=NOW)
    assert [(e.type, e.reason, e.message) for e in result.events if e.type == "Warning"] == [
        (
            "Warning",
            "DeprecatedField",
            "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead",
        )
    ]
