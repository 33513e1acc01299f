"""The generated CRD against the real kube-apiserver: schema, CEL rules, defaults, /scale."""

import copy
import json
from typing import Any

import pytest
import yaml
from kubernetes import client

from autoscaler.api import coordinates as c
from tests.support.crd import established
from tests.support.jobs import (
    INVALID,
    INVALID_UPDATES,
    NOT_TORCHRUN_NPROC_FORMS,
    TORCHRUN_NPROC_FORMS,
    UPSTREAM,
    UPSTREAM_JOBS,
    VALID,
    Invalid,
    InvalidUpdate,
    Valid,
    echo_with_nproc,
    queued_echo,
    upstream_job,
)

JSON = dict[str, Any]


def create(jobs: client.CustomObjectsApi, namespace: str, job: JSON) -> JSON:
    created: JSON = jobs.create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, job, field_validation="Strict"
    )
    return created


def causes(error: client.ApiException) -> list[tuple[str, str]]:
    body = json.loads(error.body)
    return [(cause.get("field"), cause.get("message")) for cause in body["details"]["causes"]]


def scale_of(jobs: client.CustomObjectsApi, namespace: str, name: str) -> JSON:
    scale: JSON = jobs.get_namespaced_custom_object_scale(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name
    )
    return scale


def patch_scale(jobs: client.CustomObjectsApi, namespace: str, name: str, replicas: int) -> JSON:
    body = {"spec": {"replicas": replicas}}
    scale: JSON = jobs.patch_namespaced_custom_object_scale(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name, body
    )
    return scale


def test_crd_is_established_with_upstream_names_and_scale_paths(
    kube_api: client.ApiClient, crd: JSON
) -> None:
    ext = client.ApiextensionsV1Api(kube_api)
    assert established(ext)
    stored = ext.read_custom_resource_definition(c.CRD_NAME)
    scale = stored.spec.versions[0].subresources.scale
    assert (scale.spec_replicas_path, scale.status_replicas_path, scale.label_selector_path) == (
        ".spec.pytorchReplicaSpecs.Worker.replicas",
        ".status.replicaStatuses.Worker.active",
        ".status.replicaStatuses.Worker.selector",
    )
    assert (stored.spec.names.kind, stored.spec.names.plural) == ("PyTorchJob", "pytorchjobs")


@pytest.mark.parametrize("name", UPSTREAM_JOBS)
def test_upstream_example_is_accepted_unchanged(
    jobs: client.CustomObjectsApi, namespace: str, name: str
) -> None:
    job = upstream_job(name)
    stored = create(jobs, namespace, job)
    # Nothing the user wrote is pruned or altered; only documented defaults are added.
    added = (
        {"restartPolicy": "OnFailure"}
        if "restartPolicy" not in job["spec"]["pytorchReplicaSpecs"]["Worker"]
        else {}
    )
    expected_worker = {**job["spec"]["pytorchReplicaSpecs"]["Worker"], **added}
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"] == expected_worker
    assert stored["spec"]["elasticPolicy"] == job["spec"]["elasticPolicy"]


def test_etcd_backend_example_objects_are_accepted(
    kube_api: client.ApiClient, namespace: str, jobs: client.CustomObjectsApi
) -> None:
    """etcd.yaml (the rendezvous server's Pod and Services) plus the job that points at it."""
    core = client.CoreV1Api(kube_api)
    for document in yaml.safe_load_all((UPSTREAM / "etcd.yaml").read_text()):
        if document["kind"] == "Pod":
            core.create_namespaced_pod(namespace, document)
        else:
            core.create_namespaced_service(namespace, document)
    stored = create(jobs, namespace, upstream_job("etcd-job.yaml"))
    assert stored["spec"]["elasticPolicy"]["rdzvHost"] == "etcd-client"


@pytest.mark.parametrize("value", TORCHRUN_NPROC_FORMS)
def test_every_nproc_form_torchrun_accepts_is_accepted(
    jobs: client.CustomObjectsApi, namespace: str, value: str
) -> None:
    stored = create(jobs, namespace, echo_with_nproc(value))
    assert stored["spec"]["nprocPerNode"] == value


@pytest.mark.parametrize("value", NOT_TORCHRUN_NPROC_FORMS)
def test_a_near_miss_of_the_nproc_forms_is_rejected(
    jobs: client.CustomObjectsApi, namespace: str, value: str
) -> None:
    with pytest.raises(client.ApiException) as rejected:
        create(jobs, namespace, echo_with_nproc(value))
    assert [field for field, _ in causes(rejected.value)] == ["spec.nprocPerNode"]


@pytest.mark.parametrize("case", VALID, ids=lambda case: case.id)
def test_valid_job_is_accepted(jobs: client.CustomObjectsApi, namespace: str, case: Valid) -> None:
    stored = create(jobs, namespace, case.job)
    assert (
        stored["spec"]["pytorchReplicaSpecs"].keys()
        == case.job["spec"]["pytorchReplicaSpecs"].keys()
    )


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_invalid_job_is_rejected_with_field_and_message(
    jobs: client.CustomObjectsApi, namespace: str, case: Invalid
) -> None:
    with pytest.raises(client.ApiException) as rejected:
        create(jobs, namespace, case.job)
    assert rejected.value.status == 422
    assert (case.field, case.message) in causes(rejected.value)


@pytest.mark.parametrize("case", INVALID_UPDATES, ids=lambda case: case.id)
def test_invalid_update_is_rejected(
    jobs: client.CustomObjectsApi, namespace: str, case: InvalidUpdate
) -> None:
    stored = create(jobs, namespace, queued_echo())
    changed = copy.deepcopy(stored)
    case.edit(changed)
    name = stored["metadata"]["name"]
    with pytest.raises(client.ApiException) as rejected:
        jobs.replace_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, name, changed
        )
    assert causes(rejected.value) == [(case.field, case.message)]
    kept = jobs.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    assert kept["spec"] == stored["spec"]  # nothing of the refused change was stored


def test_unknown_field_is_rejected_under_strict_field_validation(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    job = upstream_job("echo.yaml")
    job["spec"]["elasticPolicy"]["minReplica"] = 1
    with pytest.raises(client.ApiException) as rejected:
        create(jobs, namespace, job)
    assert rejected.value.status == 400
    assert (
        'unknown field "spec.elasticPolicy.minReplica"'
        in json.loads(rejected.value.body)["message"]
    )


def test_omitted_worker_replicas_is_persisted_so_scale_answers(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    job = upstream_job("echo.yaml")
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    stored = create(jobs, namespace, job)
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert stored["spec"]["runPolicy"]["suspend"] is False
    scale = scale_of(jobs, namespace, job["metadata"]["name"])
    assert (scale["spec"]["replicas"], scale["status"].get("replicas", 0)) == (1, 0)


def test_scale_patch_updates_worker_replicas_and_reads_status(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    name = create(jobs, namespace, upstream_job("imagenet.yaml"))["metadata"]["name"]
    assert patch_scale(jobs, namespace, name, 3)["spec"]["replicas"] == 3
    stored = jobs.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    selector = "training.kubeflow.org/job-name=elastic-example-imagenet"
    status = {"replicaStatuses": {"Worker": {"active": 2, "selector": selector}}}
    jobs.patch_namespaced_custom_object_status(
        c.GROUP, c.VERSION, namespace, c.PLURAL, name, {"status": status}
    )
    scale = scale_of(jobs, namespace, name)
    assert (scale["status"]["replicas"], scale["status"]["selector"]) == (2, selector)


@pytest.mark.parametrize(
    ("replicas", "cause"),
    [
        (
            3,
            (
                "spec.pytorchReplicaSpecs[Worker].replicas",
                "Invalid value: pytorchReplicaSpecs.Worker.replicas (3) must be within "
                "[elasticPolicy.minReplicas, elasticPolicy.maxReplicas] = [1, 2]",
            ),
        ),
        (
            0,
            (
                "spec.pytorchReplicaSpecs.Worker.replicas",
                "Invalid value: 0: spec.pytorchReplicaSpecs.Worker.replicas in body should be "
                "greater than or equal to 1",
            ),
        ),
    ],
)
def test_scale_writes_are_judged_by_schema_and_cel_rules(
    jobs: client.CustomObjectsApi, namespace: str, replicas: int, cause: tuple[str, str]
) -> None:
    """Measured: a write through /scale runs the whole CRD validation, CEL rules included."""
    name = create(jobs, namespace, upstream_job("echo.yaml"))["metadata"]["name"]
    with pytest.raises(client.ApiException) as rejected:
        patch_scale(jobs, namespace, name, replicas)
    assert rejected.value.status == 422
    assert cause in causes(rejected.value)
    assert scale_of(jobs, namespace, name)["spec"]["replicas"] == 2


def test_printer_columns_show_state_and_workers(
    kube_api: client.ApiClient, jobs: client.CustomObjectsApi, namespace: str
) -> None:
    create(jobs, namespace, upstream_job("echo.yaml"))
    url = f"{kube_api.configuration.host}/apis/{c.GROUP}/{c.VERSION}/namespaces/{namespace}/{c.PLURAL}"
    headers = {
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io",
        "Authorization": kube_api.configuration.auth_settings()["BearerToken"]["value"],
    }
    response = kube_api.call_api("GET", url, header_params=headers)
    response.read()
    table = json.loads(response.data)
    columns = [column["name"] for column in table["columnDefinitions"]]
    assert columns == ["Name", "State", "Workers", "Active", "Age"]
    assert table["rows"][0]["cells"][2] == 2
