"""The operator against the real kube-apiserver: the upstream envtest cases and what upstream
never tested. Pod phases are driven by the test (no kubelet), as upstream's envtest does.

Every It-case of upstream's envtest (`pkg/controller.v1/pytorch/pytorchjob_controller_test.go`,
Kubeflow training operator v1.9) is ported, with upstream's jobs; the test's docstring names it
(`pytorchjob_controller_test.go: <Context> / <It>`):

| upstream It-case | here |
| --- | --- |
| When creating the PyTorchJob / Should get the corresponding resources successfully | test_envtest_job_gets_its_resources_and_succeeds_with_the_master |
| ... / Shouldn't be updated resources if spec.runPolicy.schedulingPolicy.queue is changed after the job is created | `tests/integration/test_crd.py` test_invalid_update_is_rejected[queue-changed] (the API server refuses it; no operator needed) |
| ... / Shouldn't create resources if PyTorchJob is suspended | test_created_suspended_job_gets_nothing |
| ... / Should delete resources after PyTorchJob is suspended; Should resume PyTorchJob after PyTorchJob is unsuspended | test_envtest_suspend_and_resume |
| ... / Should not reconcile a job while managed by external controller | test_job_managed_by_another_controller_is_left_alone |
| When creating the elastic PyTorchJob / Should get the corresponding resources successfully | test_envtest_elastic_job_gets_its_resources_and_succeeds |
| ... / Should delete HPA once the PyTorchJob is suspended | test_suspend_and_resume |

Upstream waits with `Consistently` (a fixed time) to see that nothing happens; here the test waits
for the operator's later passes over the job instead (`passes_later`, a witness job).
"""

import copy
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller import rendezvous
from autoscaler.controller.runner import Operator, OperatorConfig
from autoscaler.observability.metrics import UPSTREAM_OBJECT_COUNTERS
from tests.support.controlplane import ControlPlane
from tests.support.jobs import upstream_job
from tests.support.polling import wait_for

JSON = dict[str, Any]
CPU_METRIC = {
    "type": "Resource",
    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
}


class Cluster:
    """Admin-side helpers: what a user or the kubelet would do, and what the test reads back."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.core = client.CoreV1Api(api)
        self.jobs = client.CustomObjectsApi(api)
        self.hpa = client.AutoscalingV2Api(api)

    def create(self, job: JSON) -> JSON:
        created: JSON = self.jobs.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.ns, c.PLURAL, job
        )
        return created

    def job(self, name: str) -> JSON:
        found: JSON = self.jobs.get_namespaced_custom_object(
            c.GROUP, c.VERSION, self.ns, c.PLURAL, name
        )
        return found

    def patch(self, name: str, patch: JSON) -> None:
        self.jobs.patch_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, name, patch)

    def scale(self, name: str, replicas: int) -> None:
        body = {"spec": {"replicas": replicas}}
        self.jobs.patch_namespaced_custom_object_scale(
            c.GROUP, c.VERSION, self.ns, c.PLURAL, name, body
        )

    def pods(self, job: str) -> dict[str, JSON]:
        listing = self.core.list_namespaced_pod(self.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}")
        return {
            pod["metadata"]["name"]: pod
            for pod in self.api.sanitize_for_serialization(listing.items)
        }

    def services(self, job: str) -> dict[str, JSON]:
        listing = self.core.list_namespaced_service(
            self.ns, label_selector=f"{c.LABEL_JOB_NAME}={job}"
        )
        return {
            svc["metadata"]["name"]: svc
            for svc in self.api.sanitize_for_serialization(listing.items)
        }

    def hpas(self) -> dict[str, JSON]:
        listing = self.hpa.list_namespaced_horizontal_pod_autoscaler(self.ns)
        return {
            hpa["metadata"]["name"]: hpa
            for hpa in self.api.sanitize_for_serialization(listing.items)
        }

    def set_phase(self, pod: str, phase: str, **status: Any) -> None:
        self.core.patch_namespaced_pod_status(pod, self.ns, {"status": {"phase": phase, **status}})

    def run_all(self, job: str) -> None:
        for name in self.pods(job):
            self.set_phase(name, "Running")

    def conditions(self, name: str) -> list[tuple[str, str]]:
        return [condition[:2] for condition in self.full_conditions(name)]

    def full_conditions(self, name: str) -> list[tuple[str, str, str, str]]:
        """(type, status, reason, message) of each condition, in order."""
        status = self.job(name).get("status") or {}
        return [
            (cond["type"], cond["status"], cond["reason"], cond["message"])
            for cond in status.get("conditions") or []
        ]

    def events(self, name: str) -> list[str]:
        listing = self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={name}"
        )
        return [event.reason for event in listing.items]

    def wait_pods(self, job: str, names: set[str]) -> dict[str, JSON]:
        found: dict[str, JSON] = {}

        def exactly() -> bool:
            found.clear()
            found.update(self.pods(job))
            return set(found) == names

        wait_for(exactly, what=f"pods {sorted(names)}")
        return found

    def start_running(self, job: JSON) -> dict[str, JSON]:
        """Create an elastic job, mark its workers Running (the kubelet's part), wait for Running."""
        name = job["metadata"]["name"]
        self.create(job)
        self.wait_pods(
            name, names(name, "worker", job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])
        )
        self.run_all(name)
        self.wait_condition(name, ("Running", "True"))
        return self.pods(name)

    def wait_condition(self, job: str, expected: tuple[str, str]) -> None:
        wait_for(
            lambda: self.conditions(job) and self.conditions(job)[-1] == expected,
            what=f"{job} to be {expected}",
        )


@pytest.fixture
def cluster(kube_api: client.ApiClient, namespace: str, operator: Operator) -> Cluster:
    return Cluster(kube_api, namespace)


def elastic_job(
    name: str, *, replicas: int = 2, low: int = 1, high: int = 4, **policy: Any
) -> JSON:
    job = upstream_job("echo.yaml")
    job["metadata"]["name"] = name
    job["spec"]["elasticPolicy"] = {
        "rdzvBackend": "c10d",
        "minReplicas": low,
        "maxReplicas": high,
        "maxRestarts": 3,
        **policy,
    }
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    return job


def owner_of(job: JSON) -> JSON:
    """The controller reference a created job's pods, services and HPA carry."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def passes_later(operator: Operator, count: int) -> None:
    """Return once the operator has made `count` more reconcile passes (resync: every second)."""
    passes = operator.metrics.reconciles.labels(result="ok")._value.get
    start = passes()
    wait_for(lambda: passes() >= start + count, what=f"{count} more passes")


def names(job: str, kind: str, count: int) -> set[str]:
    return {f"{job}-{kind}-{i}" for i in range(count)}


def env_of(pod: JSON) -> dict[str, str]:
    return {var["name"]: var.get("value", "") for var in pod["spec"]["containers"][0]["env"]}


def test_elastic_job_gets_pods_services_hpa_env_and_status(cluster: Cluster) -> None:
    """Upstream's elastic "Should get the corresponding resources successfully" with two
    workers, a Resource metric, the default port, and what upstream does not check."""
    created = cluster.create(elastic_job("elastic", replicas=2, metrics=[CPU_METRIC]))
    pods = cluster.wait_pods("elastic", names("elastic", "worker", 2))
    services = wait_for(lambda: len(s := cluster.services("elastic")) == 2 and s, what="services")
    hpa = wait_for(lambda: cluster.hpas().get("elastic"), what="the HPA")
    for obj in [*pods.values(), *services.values(), hpa]:
        assert obj["metadata"]["ownerReferences"] == [owner_of(created)]
    env = env_of(pods["elastic-worker-1"])
    assert (env["PET_RDZV_ENDPOINT"], env["PET_NNODES"], env["PET_MAX_RESTARTS"]) == (
        "elastic-worker-0:23456",
        "1:4",
        "3",
    )
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert pods["elastic-worker-0"]["metadata"]["labels"][c.LABEL_JOB_ROLE] == "master"
    assert services["elastic-worker-0"]["spec"]["clusterIP"] == "None"
    assert services["elastic-worker-0"]["spec"]["ports"][0]["port"] == 23456
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "elastic",
    }
    cluster.run_all("elastic")
    cluster.wait_condition("elastic", ("Running", "True"))

    def scale() -> JSON:
        return cluster.jobs.get_namespaced_custom_object_scale(
            c.GROUP, c.VERSION, cluster.ns, c.PLURAL, "elastic"
        )  # type: ignore[no-any-return]

    wait_for(lambda: scale()["status"].get("replicas") == 2, what="/scale to report 2 active")
    assert (
        scale()["status"]["selector"]
        == "training.kubeflow.org/job-name=elastic,training.kubeflow.org/operator-name=pytorchjob-controller,training.kubeflow.org/replica-type=worker"
    )
    cluster.set_phase("elastic-worker-1", "Succeeded")
    cluster.wait_condition("elastic", ("Succeeded", "True"))
    # Once finished, workers still active are counted as succeeded (upstream does the same).
    worker = lambda: cluster.job("elastic")["status"]["replicaStatuses"]["Worker"]  # noqa: E731
    wait_for(
        lambda: worker().get("succeeded") == 2 and "active" not in worker(), what="succeeded 2"
    )
    assert "completionTime" in cluster.job("elastic")["status"]


# -- upstream's envtest jobs ----------------------------------------------------------------------

ENVTEST_PORT = {"name": "pytorchjob-port", "containerPort": 8080, "protocol": "TCP"}


def envtest_template() -> JSON:
    """The pod template of upstream's envtest jobs: `pytorch`, `test-image`, port 8080."""
    container = {"name": "pytorch", "image": "test-image", "ports": [dict(ENVTEST_PORT)]}
    return {"spec": {"containers": [container]}}


def envtest_job(name: str, *, workers: int) -> JSON:
    """Upstream's envtest job: Master 1 + Worker, no nprocPerNode."""
    specs = {
        "Master": {"replicas": 1, "template": envtest_template()},
        "Worker": {"replicas": workers, "template": envtest_template()},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def envtest_elastic_job(name: str) -> JSON:
    """Upstream's elastic envtest job: one Worker, c10d, 1..3, 3 restarts, a CPU metric (whose
    Utilization target upstream gives as an averageValue, which the HPA API accepts)."""
    metric = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageValue": "80"}},
    }
    policy = {
        "rdzvBackend": "c10d",
        "minReplicas": 1,
        "maxReplicas": 3,
        "maxRestarts": 3,
        "metrics": [metric],
    }
    specs = {"Worker": {"replicas": 1, "template": envtest_template()}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"elasticPolicy": policy, "pytorchReplicaSpecs": specs},
    }


def condition_of(name: str, type_: str, status: str, reason: str, state: str) -> tuple[str, ...]:
    """A condition as upstream's envtest expects it: reason `PyTorchJob<reason>`, message
    `PyTorchJob <name> is <state>.`"""
    return (type_, status, f"PyTorchJob{reason}", f"PyTorchJob {name} is {state}.")


def replica_count(cluster: Cluster, job: str, replica_type: str, what: str) -> int:
    status = cluster.job(job).get("status") or {}
    return int(((status.get("replicaStatuses") or {}).get(replica_type) or {}).get(what, 0))


def test_envtest_job_gets_its_resources_and_succeeds_with_the_master(cluster: Cluster) -> None:
    """pytorchjob_controller_test.go: When creating the PyTorchJob / Should get the
    corresponding resources successfully."""
    created = cluster.create(envtest_job("test-job", workers=2))
    pods = cluster.wait_pods("test-job", {"test-job-master-0", *names("test-job", "worker", 2)})
    master_svc = wait_for(
        lambda: cluster.services("test-job").get("test-job-master-0"), what="the master service"
    )
    master_pod = pods["test-job-master-0"]
    assert ENVTEST_PORT in master_pod["spec"]["containers"][0]["ports"]
    env = env_of(master_pod)
    assert (env["MASTER_PORT"], env["MASTER_ADDR"], env["PET_NPROC_PER_NODE"]) == (
        str(master_svc["spec"]["ports"][0]["port"]),
        master_svc["metadata"]["name"],
        "auto",
    )
    assert master_svc["spec"]["ports"][0]["port"] == 8080
    assert owner_of(created) in master_pod["metadata"]["ownerReferences"]
    assert owner_of(created) in master_svc["metadata"]["ownerReferences"]
    cluster.set_phase("test-job-master-0", "Succeeded")
    wait_for(
        lambda: replica_count(cluster, "test-job", "Master", "succeeded") == 1,
        what="the master counted as succeeded",
    )
    assert ("Succeeded", "True") in cluster.conditions("test-job")


def test_envtest_elastic_job_gets_its_resources_and_succeeds(cluster: Cluster) -> None:
    """pytorchjob_controller_test.go: When creating the elastic PyTorchJob / Should get the
    corresponding resources successfully."""
    created = cluster.create(envtest_elastic_job("elastic-job"))
    pod = cluster.wait_pods("elastic-job", {"elastic-job-worker-0"})["elastic-job-worker-0"]
    svc = wait_for(
        lambda: cluster.services("elastic-job").get("elastic-job-worker-0"), what="the service"
    )
    hpa = wait_for(lambda: cluster.hpas().get("elastic-job"), what="the HPA")
    assert ENVTEST_PORT in pod["spec"]["containers"][0]["ports"]
    env = env_of(pod)
    elastic_vars = ("PET_RDZV_BACKEND", "PET_NNODES", "PET_RDZV_ENDPOINT", "PET_MAX_RESTARTS")
    assert [env[name] for name in elastic_vars] == [
        "c10d",
        "1:3",
        f"{svc['metadata']['name']}:8080",
        "3",
    ]
    assert svc["spec"]["ports"][0]["port"] == 8080
    for obj in (pod, svc, hpa):
        assert owner_of(created) in obj["metadata"]["ownerReferences"]
    cluster.set_phase("elastic-job-worker-0", "Succeeded")
    wait_for(
        lambda: replica_count(cluster, "elastic-job", "Worker", "succeeded") == 1,
        what="the worker counted as succeeded",
    )
    assert ("Succeeded", "True") in cluster.conditions("elastic-job")


def test_envtest_suspend_and_resume(cluster: Cluster, operator: Operator) -> None:
    """pytorchjob_controller_test.go: When creating the PyTorchJob / Should delete resources
    after PyTorchJob is suspended; Should resume PyTorchJob after PyTorchJob is unsuspended."""
    name, both = "test-job", {"test-job-master-0", "test-job-worker-0"}
    created = condition_of(name, "Created", "True", "Created", "created")
    running = condition_of(name, "Running", "True", "Running", "running")
    cluster.create(envtest_job(name, workers=1))
    cluster.wait_pods(name, both)
    wait_for(lambda: set(cluster.services(name)) == both, what="the services")
    cluster.run_all(name)
    wait_for(lambda: cluster.full_conditions(name) == [created, running], what="Running")
    started = cluster.job(name)["status"]["startTime"]

    cluster.patch(name, {"spec": {"runPolicy": {"suspend": True}}})
    suspended = [
        created,
        condition_of(name, "Running", "False", "Suspended", "suspended"),
        condition_of(name, "Suspended", "True", "Suspended", "suspended"),
    ]
    wait_for(lambda: cluster.full_conditions(name) == suspended, what="Suspended")
    cluster.wait_pods(name, set())
    wait_for(lambda: not cluster.services(name), what="the services to be removed")
    passes_later(operator, 3)
    assert (cluster.pods(name), cluster.services(name)) == ({}, {})
    assert [replica_count(cluster, name, kind, "active") for kind in ("Master", "Worker")] == [0, 0]
    assert cluster.job(name)["status"]["startTime"] == started

    # Start times have whole seconds: resume in a later second, so the new one must differ.
    first = datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    time.sleep(max(0.0, (first + timedelta(seconds=1) - datetime.now(UTC)).total_seconds()))
    cluster.patch(name, {"spec": {"runPolicy": {"suspend": False}}})
    cluster.wait_pods(name, both)
    wait_for(lambda: set(cluster.services(name)) == both, what="the services again")
    cluster.run_all(name)
    resumed = [
        created,
        condition_of(name, "Suspended", "False", "Resumed", "resumed"),
        running,
    ]
    wait_for(lambda: cluster.full_conditions(name) == resumed, what="resumed and Running")
    assert cluster.job(name)["status"]["startTime"] > started


def test_scale_up_and_down_through_scale_subresource(cluster: Cluster) -> None:
    cluster.start_running(elastic_job("scaling", replicas=2))
    before = {name: pod["metadata"]["uid"] for name, pod in cluster.pods("scaling").items()}
    cluster.scale("scaling", 4)
    cluster.wait_pods("scaling", names("scaling", "worker", 4))
    wait_for(
        lambda: set(cluster.services("scaling")) == names("scaling", "worker", 4),
        what="services to follow",
    )
    cluster.run_all("scaling")
    cluster.scale("scaling", 1)
    pods = cluster.wait_pods("scaling", {"scaling-worker-0"})
    assert (
        pods["scaling-worker-0"]["metadata"]["uid"] == before["scaling-worker-0"]
    )  # worker-0 kept
    wait_for(
        lambda: set(cluster.services("scaling")) == {"scaling-worker-0"}, what="services to follow"
    )
    wait_for(
        lambda: cluster.job("scaling")["status"]["replicaStatuses"]["Worker"].get("active") == 1,
        what="active 1",
    )
    assert ("Restarting", "True") not in cluster.conditions("scaling")
    assert cluster.conditions("scaling")[-1] == ("Running", "True")
    assert "failed" not in cluster.job("scaling")["status"]["replicaStatuses"]["Worker"]


def test_hpa_follows_policy_and_is_removed_with_metrics(cluster: Cluster) -> None:
    cluster.create(elastic_job("hpa", replicas=2, metrics=[CPU_METRIC]))
    wait_for(lambda: cluster.hpas().get("hpa"), what="the HPA")
    cluster.patch("hpa", {"spec": {"elasticPolicy": {"maxReplicas": 6}}})
    wait_for(lambda: cluster.hpas()["hpa"]["spec"]["maxReplicas"] == 6, what="the HPA update")
    cluster.patch("hpa", {"spec": {"elasticPolicy": {"metrics": None}}})
    wait_for(lambda: "hpa" not in cluster.hpas(), what="the HPA to be deleted")


def test_foreign_hpa_is_left_alone_with_condition_and_event(cluster: Cluster) -> None:
    foreign = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "taken"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 9,
        },
    }
    cluster.hpa.create_namespaced_horizontal_pod_autoscaler(cluster.ns, foreign)
    cluster.create(elastic_job("taken", replicas=1, metrics=[CPU_METRIC]))
    wait_for(
        lambda: ("HorizontalPodAutoscaler", "False") in cluster.conditions("taken"),
        what="the HPA condition",
    )
    wait_for(lambda: "HPANotOwned" in cluster.events("taken"), what="the HPANotOwned event")
    hpa = cluster.hpas()["taken"]
    assert (hpa["spec"]["maxReplicas"], hpa["metadata"].get("ownerReferences")) == (9, None)


def test_suspend_and_resume(cluster: Cluster) -> None:
    """pytorchjob_controller_test.go: When creating the elastic PyTorchJob / Should delete HPA
    once the PyTorchJob is suspended. With two workers and a resume, which brings it back."""
    cluster.create(elastic_job("pause", replicas=2, metrics=[CPU_METRIC]))
    cluster.wait_pods("pause", names("pause", "worker", 2))
    wait_for(lambda: "pause" in cluster.hpas(), what="the HPA")
    cluster.run_all("pause")
    cluster.wait_condition("pause", ("Running", "True"))
    started = cluster.job("pause")["status"]["startTime"]
    cluster.patch("pause", {"spec": {"runPolicy": {"suspend": True}}})
    cluster.wait_pods("pause", set())
    wait_for(
        lambda: not cluster.services("pause") and "pause" not in cluster.hpas(),
        what="services and HPA gone",
    )
    cluster.wait_condition("pause", ("Suspended", "True"))
    assert cluster.conditions("pause") == [
        ("Created", "True"),
        ("Running", "False"),
        ("Suspended", "True"),
    ]
    assert cluster.job("pause")["status"]["startTime"] == started
    cluster.patch("pause", {"spec": {"runPolicy": {"suspend": False}}})
    cluster.wait_pods("pause", names("pause", "worker", 2))
    wait_for(lambda: "pause" in cluster.hpas(), what="the HPA to come back")
    cluster.run_all("pause")
    cluster.wait_condition("pause", ("Running", "True"))
    assert cluster.conditions("pause") == [
        ("Created", "True"),
        ("Suspended", "False"),
        ("Running", "True"),
    ]


def test_created_suspended_job_gets_nothing(cluster: Cluster, operator: Operator) -> None:
    """pytorchjob_controller_test.go: When creating the PyTorchJob / Shouldn't create resources
    if PyTorchJob is suspended."""
    job = envtest_job("test-job", workers=1)
    job["spec"]["runPolicy"] = {"suspend": True}
    cluster.create(job)
    cluster.wait_condition("test-job", ("Suspended", "True"))
    passes_later(operator, 3)
    assert cluster.full_conditions("test-job") == [
        condition_of("test-job", "Created", "True", "Created", "created"),
        condition_of("test-job", "Suspended", "True", "Suspended", "suspended"),
    ]
    assert (cluster.pods("test-job"), cluster.services("test-job")) == ({}, {})
    assert "startTime" not in cluster.job("test-job")["status"]


def failed_with(code: int) -> JSON:
    return {
        "containerStatuses": [
            {
                "name": "pytorch",
                "image": "i",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": code}},
            }
        ]
    }


@pytest.mark.parametrize(
    ("policy", "code", "outcome"),
    [
        ("OnFailure", 1, "recreated"),
        ("ExitCode", 137, "recreated"),
        ("ExitCode", 1, "Failed"),
        ("Never", 1, "Failed"),
    ],
)
def test_restart_policies(cluster: Cluster, policy: str, code: int, outcome: str) -> None:
    name = f"restart-{policy.lower()}-{code}"
    job = elastic_job(name, replicas=2)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = policy
    cluster.start_running(job)
    uid = cluster.pods(name)[f"{name}-worker-1"]["metadata"]["uid"]
    cluster.set_phase(f"{name}-worker-1", "Failed", **failed_with(code))
    if outcome == "recreated":
        wait_for(
            lambda: (
                (p := cluster.pods(name).get(f"{name}-worker-1")) and p["metadata"]["uid"] != uid
            ),
            what="a new worker-1",
        )
        assert ("Failed", "True") not in cluster.conditions(name)
    else:
        cluster.wait_condition(name, ("Failed", "True"))


def test_losing_worker_0_restarts_every_worker(cluster: Cluster) -> None:
    cluster.start_running(elastic_job("host", replicas=3))
    uids = {name: pod["metadata"]["uid"] for name, pod in cluster.pods("host").items()}
    cluster.set_phase("host-worker-0", "Failed", **failed_with(1))

    def all_replaced() -> bool:
        pods = cluster.pods("host")
        return set(pods) == set(uids) and all(pods[n]["metadata"]["uid"] != uids[n] for n in uids)

    wait_for(all_replaced, what="every worker to be recreated")
    wait_for(lambda: "PyTorchJobRestarting" in cluster.events("host"), what="the restart Event")


def test_backoff_limit_fails_the_job(cluster: Cluster) -> None:
    job = elastic_job("backoff", replicas=2)
    job["spec"]["runPolicy"] = {"backoffLimit": 2, "cleanPodPolicy": "All"}
    cluster.create(job)
    cluster.wait_pods("backoff", names("backoff", "worker", 2))
    cluster.run_all("backoff")
    restarted = {
        "containerStatuses": [
            {
                "name": "pytorch",
                "image": "i",
                "imageID": "",
                "ready": True,
                "restartCount": 2,
                "state": {"running": {}},
            }
        ]
    }
    cluster.set_phase("backoff-worker-1", "Running", **restarted)
    cluster.wait_condition("backoff", ("Failed", "True"))
    assert (
        cluster.job("backoff")["status"]["conditions"][-1]["message"]
        == "Job backoff has failed because it has reached the specified backoff limit"
    )
    cluster.wait_pods("backoff", set())


def test_active_deadline_fails_the_job(cluster: Cluster) -> None:
    job = elastic_job("deadline", replicas=1)
    job["spec"]["runPolicy"] = {"activeDeadlineSeconds": 2}
    cluster.create(job)
    cluster.wait_condition("deadline", ("Failed", "True"))
    assert (
        "active longer than specified deadline"
        in cluster.job("deadline")["status"]["conditions"][-1]["message"]
    )


def test_ttl_deletes_the_finished_job(cluster: Cluster) -> None:
    job = elastic_job("ttl", replicas=1)
    job["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 1}
    cluster.create(job)
    cluster.wait_pods("ttl", {"ttl-worker-0"})
    cluster.set_phase("ttl-worker-0", "Succeeded")

    def deleted() -> bool:
        try:
            cluster.job("ttl")
        except client.ApiException as error:
            return error.status == 404
        return False

    wait_for(deleted, what="the job to be deleted after its TTL")


@pytest.mark.parametrize(
    ("policy", "left"),
    [("None", {"w-worker-0", "w-worker-1"}), ("Running", {"w-worker-1"}), ("All", set())],
)
def test_clean_pod_policy(cluster: Cluster, policy: str, left: set[str]) -> None:
    job = elastic_job("w", replicas=2)
    job["spec"]["runPolicy"] = {"cleanPodPolicy": policy}
    cluster.create(job)
    cluster.wait_pods("w", names("w", "worker", 2))
    cluster.set_phase("w-worker-0", "Running")
    cluster.set_phase("w-worker-1", "Succeeded")
    cluster.wait_condition("w", ("Succeeded", "True"))
    cluster.wait_pods("w", left)


def test_master_worker_job(cluster: Cluster) -> None:
    job = copy.deepcopy(upstream_job("echo.yaml"))
    job["metadata"]["name"] = "mw"
    del job["spec"]["elasticPolicy"]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    job["spec"]["pytorchReplicaSpecs"]["Master"] = {**copy.deepcopy(worker), "replicas": 1}
    cluster.create(job)
    pods = cluster.wait_pods("mw", {"mw-master-0", "mw-worker-0", "mw-worker-1"})
    master, worker_1 = env_of(pods["mw-master-0"]), env_of(pods["mw-worker-1"])
    assert (master["MASTER_ADDR"], master["MASTER_PORT"], master["RANK"], master["WORLD_SIZE"]) == (
        "mw-master-0",
        "23456",
        "0",
        "3",
    )
    assert (worker_1["RANK"], worker_1["PET_NNODES"], worker_1["PET_NPROC_PER_NODE"]) == (
        "2",
        "3",
        "auto",
    )
    assert [init["name"] for init in pods["mw-worker-1"]["spec"]["initContainers"]] == [
        "init-pytorch"
    ]
    assert pods["mw-master-0"]["spec"].get("initContainers") is None
    assert pods["mw-master-0"]["metadata"]["labels"][c.LABEL_JOB_ROLE] == "master"
    cluster.run_all("mw")
    cluster.wait_condition("mw", ("Running", "True"))
    cluster.set_phase("mw-master-0", "Succeeded")
    cluster.wait_condition("mw", ("Succeeded", "True"))


def test_elastic_master_worker_env(cluster: Cluster) -> None:
    job = elastic_job(
        "emw",
        replicas=2,
        low=1,
        high=3,
        rdzvConf=[{"key": "last_call_timeout", "value": "5"}],
        standalone=True,
    )
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    job["spec"]["pytorchReplicaSpecs"]["Master"] = {**copy.deepcopy(worker), "replicas": 1}
    cluster.create(job)
    pods = cluster.wait_pods("emw", {"emw-master-0", "emw-worker-0", "emw-worker-1"})
    env = env_of(pods["emw-master-0"])
    assert (env["PET_NNODES"], env["PET_RDZV_ENDPOINT"], env["MASTER_ADDR"]) == (
        "1:3",
        "emw-worker-0:23456",
        "emw-master-0",
    )
    assert (env["PET_RDZV_CONF"], env["PET_STANDALONE"]) == ("last_call_timeout=5", "1")


def test_job_managed_by_another_controller_is_left_alone(
    cluster: Cluster, operator: Operator
) -> None:
    """pytorchjob_controller_test.go: When creating the PyTorchJob / Should not reconcile a job
    while managed by external controller. Created suspended, then resumed: nothing either time."""
    job = envtest_job("test-job", workers=1)
    job["spec"]["runPolicy"] = {"managedBy": "kueue.x-k8s.io/multikueue", "suspend": True}
    cluster.create(job)
    processed_before_witness(cluster, operator, "test-job", suspend=True, witness="witness-1")
    assert (cluster.pods("test-job"), cluster.services("test-job")) == ({}, {})
    assert cluster.job("test-job").get("status") is None  # no conditions, no startTime
    cluster.patch("test-job", {"spec": {"runPolicy": {"suspend": False}}})
    processed_before_witness(cluster, operator, "test-job", suspend=False, witness="witness-2")
    assert (cluster.pods("test-job"), cluster.services("test-job")) == ({}, {})
    assert cluster.job("test-job").get("status") is None


def processed_before_witness(
    cluster: Cluster, operator: Operator, name: str, *, suspend: bool, witness: str
) -> None:
    """Return once the operator has seen `name` with `suspend`, queued it, and then handled a
    witness job created after it."""
    key = (cluster.ns, name)

    def seen() -> bool:
        cached = operator.jobs.get(key)
        return cached is not None and cached["spec"]["runPolicy"].get("suspend") is suspend

    wait_for(seen, what=f"the operator to see {name} with suspend={suspend}")
    operator.queue.add(key)
    cluster.create(elastic_job(witness, replicas=1))  # processed after the queued job
    cluster.wait_pods(witness, {f"{witness}-worker-0"})


def resync_writes_nothing(operator: Operator, namespace: str | None = None) -> bool:
    """Whether two resyncs of every job the operator knows made no write (resync: every second);
    in `namespace` only when given: the session's operator also resyncs other tests' jobs, and
    whether those are steady is for their tests to say."""
    passes = operator.metrics.reconciles.labels(result="ok")._value.get
    kube, written = operator.kube, []
    request = kube.request

    def counted(method: str, path: str, **options: Any) -> JSON:
        if method != "GET" and (namespace is None or f"/namespaces/{namespace}/" in path):
            written.append(f"{method} {path}")
        return request(method, path, **options)

    kube.request = counted  # type: ignore[method-assign]
    try:
        start = passes()
        wait_for(lambda: passes() >= start + 2 * len(operator.jobs.items()), what="two resyncs")
    finally:
        del kube.request  # the class's again
    return not written


# An HPA target the API server stores in its canonical form ("1000m" comes back as "1"): the
# job's own text differs from the stored HPA's, their values do not.
CANONICALISED_METRIC = {
    "type": "External",
    "external": {
        "metric": {"name": "queue_depth"},
        "target": {"type": "AverageValue", "averageValue": "1000m"},
    },
}


@pytest.mark.parametrize(
    ("name", "metric", "stored_target"),
    [
        ("steady", CPU_METRIC, {"type": "Utilization", "averageUtilization": 80}),
        ("steady-quantity", CANONICALISED_METRIC, {"type": "AverageValue", "averageValue": "1"}),
    ],
)
def test_resync_of_steady_jobs_writes_nothing(
    cluster: Cluster, operator: Operator, name: str, metric: JSON, stored_target: JSON
) -> None:
    """Every job of the session is resynced (every second here); steady ones cost no write."""
    cluster.start_running(elastic_job(name, replicas=2, metrics=[metric]))
    wait_for(lambda: name in cluster.hpas(), what="the HPA")
    (stored,) = cluster.hpas()[name]["spec"]["metrics"]
    assert stored[stored["type"].lower()]["target"] == stored_target
    wait_for(
        lambda: resync_writes_nothing(operator, cluster.ns),
        timeout=60,
        what="a resync of every job without a single write in its namespace",
    )


def test_template_metadata_reaches_the_pods_finalizers_included(cluster: Cluster) -> None:
    """Upstream's pod control copies the template's labels, annotations and finalizers: the
    CRD's template schema keeps finalizers, and the pod API takes them."""
    finalizer = "example.com/keep-logs"
    job = elastic_job("kept", replicas=1)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "labels": {"team": "a"},
        "annotations": {"note": "b"},
        "finalizers": [finalizer],
    }
    stored = cluster.create(job)
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"][
        "finalizers"
    ] == [finalizer]
    pod = cluster.wait_pods("kept", {"kept-worker-0"})["kept-worker-0"]
    try:
        meta = pod["metadata"]
        assert (meta["finalizers"], meta["labels"]["team"], meta["annotations"]["note"]) == (
            [finalizer],
            "a",
            "b",
        )
    finally:  # the test's own finalizer: nothing else would remove it
        cluster.core.patch_namespaced_pod(
            "kept-worker-0", cluster.ns, {"metadata": {"finalizers": None}}
        )


def test_pod_the_api_server_rejects_gets_a_warning_event_and_backoff(
    cluster: Cluster, operator: Operator
) -> None:
    """A template the CRD accepts but the pod API does not (a sidecar named against DNS rules)."""
    job = elastic_job("sidecar", replicas=1)
    containers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers.append({"name": "Side_Car", "image": "busybox"})
    cluster.create(job)
    wait_for(lambda: "FailedCreatePod" in cluster.events("sidecar"), what="a FailedCreatePod event")
    listing = cluster.core.list_namespaced_event(
        cluster.ns, field_selector="involvedObject.name=sidecar,reason=FailedCreatePod"
    )
    assert 'Pod "sidecar-worker-0" is invalid' in listing.items[0].message
    assert "spec.containers[1].name" in listing.items[0].message
    assert cluster.pods("sidecar") == {}
    assert operator.healthy()


def test_successful_writes_are_recorded_as_events(cluster: Cluster) -> None:
    cluster.create(elastic_job("noted", replicas=1))
    wait_for(
        lambda: {"SuccessfulCreatePod", "SuccessfulCreateService"} <= set(cluster.events("noted")),
        what="events",
    )


# -- upstream's Events, counters and flags --------------------------------------------------------


def counted(operator: Operator, what: str, namespace: str) -> float:
    """An upstream job counter's value for the namespace (0 before its first event)."""
    value = operator.metrics.registry.get_sample_value(
        f"training_operator_jobs_{what}_total",
        {"job_namespace": namespace, "framework": "pytorch"},
    )
    return value or 0.0


def object_counters(running: Operator) -> dict[str, float]:
    """Upstream's object counters as the operator's /metrics serves them (`<name>_total`)."""
    return {
        name: running.metrics.registry.get_sample_value(f"{name}_total") or 0.0
        for name in UPSTREAM_OBJECT_COUNTERS
    }


def reasons(cluster: Cluster, name: str) -> list[str]:
    return cluster.events(name)


def test_a_non_retryable_exit_is_reported_as_upstream_does_and_counted_once(
    cluster: Cluster, operator: Operator
) -> None:
    """ExitedWithCode once although the job is resynced every second, the Warning
    PyTorchJobFailed, and upstream's counters: one job created, one failed."""
    job = elastic_job("exit-one", replicas=2)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    cluster.start_running(job)
    assert counted(operator, "created", cluster.ns) == 1
    cluster.set_phase("exit-one-worker-1", "Failed", **failed_with(1))
    cluster.wait_condition("exit-one", ("Failed", "True"))
    wait_for(lambda: "PyTorchJobFailed" in reasons(cluster, "exit-one"), what="PyTorchJobFailed")
    passes_later(operator, 4)
    assert reasons(cluster, "exit-one").count("ExitedWithCode") == 1
    assert counted(operator, "failed", cluster.ns) == 1
    assert counted(operator, "successful", cluster.ns) == 0


def warnings(cluster: Cluster, name: str, reason: str) -> list[tuple[str, str]]:
    listing = cluster.core.list_namespaced_event(
        cluster.ns, field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return [(event.type, event.message) for event in listing.items]


def test_a_container_that_cannot_start_gets_one_warning(
    cluster: Cluster, operator: Operator
) -> None:
    """Upstream's abnormal-pod Warning for a container waiting with a message, sent once
    although the job is resynced every second."""
    cluster.create(elastic_job("no-image", replicas=1))
    cluster.wait_pods("no-image", {"no-image-worker-0"})
    waiting = {
        "name": "pytorch",
        "image": "registry.invalid/x",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
    }
    cluster.set_phase("no-image-worker-0", "Pending", containerStatuses=[waiting])
    wait_for(lambda: "ImagePullBackOff" in reasons(cluster, "no-image"), what="a Warning")
    passes_later(operator, 4)
    assert warnings(cluster, "no-image", "ImagePullBackOff") == [
        (
            "Warning",
            "Error pod no-image-worker-0 container pytorch waiting message: Back-off pulling image",
        )
    ]


def test_a_pod_the_scheduler_cannot_place_gets_one_warning(
    cluster: Cluster, operator: Operator, scheduler: ControlPlane
) -> None:
    """Upstream's abnormal-pod Warning for a pod whose latest condition is not True: the real
    kube-scheduler's PodScheduled=False (Unschedulable), once."""
    job = elastic_job("nowhere", replicas=1)
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["spec"]["nodeSelector"] = {"elastic-autoscaler.io/test-node": "none"}
    cluster.create(job)
    wait_for(lambda: "Unschedulable" in reasons(cluster, "nowhere"), what="the Warning")
    passes_later(operator, 4)
    (scheduled,) = [
        cond
        for cond in cluster.pods("nowhere")["nowhere-worker-0"]["status"]["conditions"]
        if cond["type"] == "PodScheduled"
    ]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert warnings(cluster, "nowhere", "Unschedulable") == [
        ("Warning", f"Error pod nowhere-worker-0 condition message: {scheduled['message']}")
    ]


def test_an_operator_for_one_namespace_sees_only_its_jobs(
    cluster: Cluster, operator_kubeconfig: Path
) -> None:
    """Upstream's `--namespace`: lists and watches of jobs, pods, services and HPAs are scoped."""
    other = f"{cluster.ns}-other"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        cluster.create(elastic_job("mine", replicas=1))
        theirs = Cluster(cluster.api, other)
        theirs.create(elastic_job("theirs", replicas=1))
        theirs.wait_pods("theirs", {"theirs-worker-0"})  # made by the session's operator
        kube = Kube(api_client(kubeconfig=str(operator_kubeconfig)))
        scoped = Operator(kube, config=OperatorConfig(namespace=cluster.ns, watch_timeout=5))
        stop = threading.Event()
        thread = threading.Thread(target=scoped.run, args=(stop,), daemon=True)
        thread.start()
        try:
            wait_for(scoped.healthy, what="the scoped operator's caches")
            wait_for(scoped.pods.items, what="the scoped operator to see a pod")
            assert {obj["metadata"]["namespace"] for obj in scoped.jobs.items()} == {cluster.ns}
            assert {obj["metadata"]["namespace"] for obj in scoped.pods.items()} == {cluster.ns}
        finally:
            stop.set()
            thread.join(timeout=30)
            kube.api.close()
    finally:
        cluster.core.delete_namespace(other)


def torchft_job(name: str, *, replicas: int = 2) -> JSON:
    job = elastic_job(name, replicas=replicas)
    job["metadata"]["annotations"] = {"elastic-autoscaler.io/fault-tolerance": "torchft"}
    return job


def test_a_torchft_job_gets_its_lighthouse_and_restarts_only_what_it_must(
    cluster: Cluster,
) -> None:
    """The lighthouse Pod and Service first, workers stamped with its uid and counted in status;
    worker-0 lost: only it is replaced; the lighthouse lost: a new one, and every worker
    restarted on it."""
    cluster.create(torchft_job("ft", replicas=3))
    pods = cluster.wait_pods("ft", {"ft-lighthouse", *names("ft", "worker", 3)})
    assert "ft-lighthouse" in cluster.services("ft")
    beacon = pods["ft-lighthouse"]["metadata"]["uid"]
    stamp = "elastic-autoscaler.io/torchft-lighthouse-uid"
    assert {pods[n]["metadata"]["annotations"][stamp] for n in names("ft", "worker", 3)} == {beacon}
    assert "PET_RDZV_ENDPOINT" not in env_of(pods["ft-worker-0"])
    cluster.run_all("ft")
    cluster.wait_condition("ft", ("Running", "True"))
    wait_for(
        lambda: cluster.job("ft")["status"]["replicaStatuses"].get("Lighthouse") == {"active": 1},
        what="the lighthouse counted in status",
    )
    uids = {name: pod["metadata"]["uid"] for name, pod in cluster.pods("ft").items()}
    cluster.set_phase("ft-worker-0", "Failed", **failed_with(1))
    wait_for(
        lambda: (
            cluster.pods("ft").get("ft-worker-0", {}).get("metadata", {}).get("uid")
            not in (None, uids["ft-worker-0"])
        ),
        what="worker-0 replaced",
    )
    kept = cluster.pods("ft")
    assert all(kept[n]["metadata"]["uid"] == uids[n] for n in ("ft-worker-1", "ft-worker-2"))

    cluster.set_phase("ft-lighthouse", "Failed", **failed_with(137))

    def restarted_on_a_new_lighthouse() -> bool:
        now = cluster.pods("ft")
        new = now.get("ft-lighthouse", {}).get("metadata", {}).get("uid")
        workers = [now.get(n, {}).get("metadata", {}) for n in names("ft", "worker", 3)]
        return new not in (None, beacon) and all(
            w.get("annotations", {}).get(stamp) == new for w in workers
        )

    wait_for(restarted_on_a_new_lighthouse, what="a new lighthouse and every worker on it")
    wait_for(lambda: "TorchftLighthouseLost" in cluster.events("ft"), what="the lighthouse Event")


def test_an_invalid_torchft_job_gets_a_condition_and_an_event_and_no_pods(
    cluster: Cluster, operator: Operator
) -> None:
    job = torchft_job("ft-bad")
    job["spec"]["nprocPerNode"] = "2"
    cluster.create(job)
    wait_for(
        lambda: ("FaultTolerance", "False") in cluster.conditions("ft-bad"),
        what="the FaultTolerance condition",
    )
    wait_for(lambda: "InvalidFaultTolerance" in cluster.events("ft-bad"), what="the Warning")
    passes_later(operator, 2)
    assert cluster.pods("ft-bad") == {}


def store_job(name: str, *, replicas: int = 2) -> JSON:
    job = elastic_job(name, replicas=replicas)
    job["metadata"]["annotations"] = {rendezvous.ANNOTATION: rendezvous.STORE}
    return job


def test_a_job_with_its_own_rendezvous_store_gets_it_and_no_worker_hosts_it(
    cluster: Cluster,
) -> None:
    """The store Pod and its headless Service beside the workers; every worker joins it as a
    client; counted in status; the store lost: a new one, and no worker is replaced for it."""
    cluster.create(store_job("rs", replicas=2))
    pods = cluster.wait_pods("rs", {"rs-rendezvous", *names("rs", "worker", 2)})
    assert "rs-rendezvous" in cluster.services("rs")
    for name in names("rs", "worker", 2):
        env = env_of(pods[name])
        assert env["PET_RDZV_ENDPOINT"] == f"rs-rendezvous:{rendezvous.PORT}"
        assert env["PET_RDZV_CONF"].endswith(",is_host=0")
    cluster.run_all("rs")
    cluster.wait_condition("rs", ("Running", "True"))
    wait_for(
        lambda: cluster.job("rs")["status"]["replicaStatuses"].get("Rendezvous") == {"active": 1},
        what="the store counted in status",
    )
    uids = {name: pod["metadata"]["uid"] for name, pod in cluster.pods("rs").items()}
    cluster.set_phase("rs-rendezvous", "Failed", **failed_with(137))
    wait_for(
        lambda: (
            cluster.pods("rs").get("rs-rendezvous", {}).get("metadata", {}).get("uid")
            not in (None, uids["rs-rendezvous"])
        ),
        what="the store replaced",
    )
    wait_for(lambda: "RendezvousStoreLost" in cluster.events("rs"), what="the store's Event")
    kept = cluster.pods("rs")
    assert all(kept[n]["metadata"]["uid"] == uids[n] for n in names("rs", "worker", 2))


def test_an_invalid_rendezvous_store_gets_a_condition_and_an_event_and_no_pods(
    cluster: Cluster, operator: Operator
) -> None:
    job = store_job("rs-bad")
    job["spec"]["elasticPolicy"]["rdzvBackend"] = "etcd-v2"
    cluster.create(job)
    wait_for(
        lambda: ("Rendezvous", "False") in cluster.conditions("rs-bad"),
        what="the Rendezvous condition",
    )
    wait_for(lambda: "InvalidRendezvous" in cluster.events("rs-bad"), what="the Warning")
    passes_later(operator, 2)
    assert cluster.pods("rs-bad") == {}
