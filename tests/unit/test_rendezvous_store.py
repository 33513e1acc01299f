"""The rendezvous store pod in the reconcile plan and the pod builders: the store and its
Service, the workers' rendezvous env, its replacement, and the validation of the annotation."""

from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller import rendezvous
from autoscaler.controller.builders import desired_pod
from autoscaler.controller.conditions import RENDEZVOUS
from autoscaler.controller.reconcile import plan
from autoscaler.controller.reconcile_pass import Observed, Plan
from tests.support.clock import NOW
from tests.unit.test_reconcile import condition, job, pod, service

JSON = dict[str, Any]
ELASTIC = {"minReplicas": 1, "maxReplicas": 4}
OPT_IN = {rendezvous.ANNOTATION: rendezvous.STORE}


def store_job(replicas: int = 2, *, annotations: JSON | None = None, **kwargs: Any) -> JSON:
    manifest = job(replicas=replicas, elastic=kwargs.pop("elastic", ELASTIC), **kwargs)
    template = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    template["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456}]
    manifest["metadata"]["annotations"] = OPT_IN if annotations is None else annotations
    manifest["status"] = manifest["status"] or {"conditions": [condition("Created")]}
    return manifest


def store(phase: str = "Running", **extra: Any) -> JSON:
    labels = {"training.kubeflow.org/replica-type": "rendezvous"}
    return {
        "metadata": {"name": "j-rendezvous", "uid": "s1", "labels": labels, **extra},
        "status": {"phase": phase},
    }


def store_service() -> JSON:
    return {"metadata": store()["metadata"]}


def created(result: Plan, kind: str) -> list[str]:
    return [obj["metadata"]["name"] for obj in result.create if obj["kind"] == kind]


def env_of(manifest: JSON, index: int = 0) -> dict[str, str]:
    built = desired_pod(
        default_job(PyTorchJob.model_validate(manifest)), replica_type="Worker", index=index
    )
    return {v["name"]: v.get("value", "") for v in built["spec"]["containers"][0]["env"]}


def test_a_new_job_gets_its_store_and_service_beside_its_workers() -> None:
    result = plan(store_job(), Observed(), now=NOW)
    assert created(result, "Pod") == ["j-rendezvous", "j-worker-0", "j-worker-1"]
    assert created(result, "Service") == ["j-rendezvous", "j-worker-0", "j-worker-1"]
    pod_ = next(
        o for o in result.create if o["metadata"]["name"] == "j-rendezvous" and o["kind"] == "Pod"
    )
    assert pod_["spec"]["restartPolicy"] == "Never"
    assert pod_["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    command = pod_["spec"]["containers"][0]["command"]
    assert (command[:2], command[-1]) == (["python", "-c"], str(rendezvous.PORT))
    anti = pod_["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"]["training.kubeflow.org/replica-type"] == "worker"


@pytest.mark.parametrize(
    ("annotations", "elastic", "endpoint", "conf"),
    [
        (OPT_IN, ELASTIC, "j-rendezvous:29400", "last_call_timeout=3,keep_alive_interval=2,keep_alive_max_attempt=3,is_host=0"),
        ({}, ELASTIC, "j-worker-0:23456", "last_call_timeout=3,keep_alive_interval=2,keep_alive_max_attempt=3"),
        (OPT_IN, {**ELASTIC, "rdzvConf": [{"key": "read_timeout", "value": "30"}]}, "j-rendezvous:29400", "read_timeout=30,is_host=0"),
        (OPT_IN, {**ELASTIC, "rdzvConf": [{"key": "is_host", "value": "0"}]}, "j-rendezvous:29400", "is_host=0"),
    ],
)  # fmt: skip
def test_every_worker_joins_the_store_as_a_client(
    annotations: JSON, elastic: JSON, endpoint: str, conf: str
) -> None:
    manifest = store_job(annotations=annotations, elastic=elastic)
    for index in (0, 1):
        env = env_of(manifest, index)
        assert (env["PET_RDZV_ENDPOINT"], env["PET_RDZV_CONF"]) == (endpoint, conf)


def test_a_steady_job_writes_nothing_but_counts_its_store() -> None:
    observed = Observed(
        pods=[store(), pod(0, "Running"), pod(1, "Running")],
        services=[store_service(), service(0), service(1)],
    )
    result = plan(store_job(), observed, now=NOW)
    assert (result.create, result.delete) == ([], [])
    assert result.status is not None
    assert result.status["replicaStatuses"]["Rendezvous"] == {"active": 1}
    assert result.status["replicaStatuses"]["Worker"]["active"] == 2


@pytest.mark.parametrize(
    ("stores", "deleted", "created_pods"),
    [
        ([store("Failed")], [("Pod", "j-rendezvous")], []),  # deleted first, then replaced
        ([store("Succeeded")], [("Pod", "j-rendezvous")], []),
        ([], [], ["j-rendezvous"]),
        ([store("Pending")], [], []),
        ([store("Failed", deletionTimestamp="2026-11-29T12:00:00Z")], [], []),  # going
    ],
)
def test_a_store_that_ended_is_replaced_and_no_worker_restarts(
    stores: list[JSON], deleted: list[tuple[str, str]], created_pods: list[str]
) -> None:
    observed = Observed(
        pods=[*stores, pod(0, "Running"), pod(1, "Running")],
        services=[store_service(), service(0), service(1)],
    )
    result = plan(store_job(), observed, now=NOW)
    assert result.delete == deleted
    assert created(result, "Pod") == created_pods


def test_a_finished_job_deletes_its_store_whatever_its_clean_pod_policy() -> None:
    manifest = store_job()
    manifest["status"]["conditions"].append(condition("Succeeded"))
    manifest["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}
    observed = Observed(pods=[store(), pod(0, "Succeeded")], services=[store_service()])
    result = plan(manifest, observed, now=NOW)
    assert ("Pod", "j-rendezvous") in result.delete
    assert ("Service", "j-rendezvous") in result.delete


@pytest.mark.parametrize(
    ("annotations", "elastic", "problem"),
    [
        ({rendezvous.ANNOTATION: "worker-0"}, ELASTIC, 'must be "store"'),
        (OPT_IN, None, "needs spec.elasticPolicy"),
        (OPT_IN, {**ELASTIC, "rdzvHost": "elsewhere"}, "set neither"),
        (OPT_IN, {**ELASTIC, "rdzvBackend": "etcd-v2"}, "needs the c10d rendezvous backend"),
        ({**OPT_IN, "elastic-autoscaler.io/fault-tolerance": "torchft"}, ELASTIC, "a torchft job"),
    ],
)
def test_an_annotation_that_cannot_run_creates_nothing_and_says_why(
    annotations: JSON, elastic: JSON | None, problem: str
) -> None:
    result = plan(store_job(annotations=annotations, elastic=elastic), Observed(), now=NOW)
    assert result.create == []
    assert result.status is not None
    found = [c for c in result.status["conditions"] if c["type"] == RENDEZVOUS]
    assert [c["status"] for c in found] == ["False"], result.status["conditions"]
    assert found[0]["reason"] == "InvalidRendezvous"
    assert problem in found[0]["message"]
    assert any(e.reason == "InvalidRendezvous" for e in result.events), result.events
