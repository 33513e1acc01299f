"""The real control plane works: version, CRUD, RBAC, and the garbage collector."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.support.controlplane import RESTRICTED_USER, ControlPlane


def test_version_is_the_built_release(kube_api: client.ApiClient) -> None:
    info = client.VersionApi(kube_api).get_code()
    assert info.git_version == "v1.36.3"


def test_configmap_round_trip(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="probe"), data={"k": "v"})
    core.create_namespaced_config_map(namespace, body)
    assert core.read_namespaced_config_map("probe", namespace).data == {"k": "v"}


def test_rbac_denies_restricted_user(control_plane: ControlPlane, namespace: str) -> None:
    path = control_plane.kubeconfig_for(RESTRICTED_USER)
    api = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
    with api, pytest.raises(ApiException) as denied:
        client.CoreV1Api(api).list_namespaced_secret(namespace)  # never granted to any role here
    assert denied.value.status == 403
    assert denied.value.body is not None
    message = json.loads(denied.value.body)["message"]
    assert f'User "{RESTRICTED_USER}" cannot list resource "secrets"' in message


def test_garbage_collector_deletes_orphans(
    controller_manager: ControlPlane, kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    assert owner.metadata is not None
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dependent", owner_references=[ref])),
    )
    core.delete_namespaced_config_map("owner", namespace)

    deadline = time.monotonic() + 30
    while _exists(core, "dependent", namespace):
        assert time.monotonic() < deadline, (
            "garbage collector did not delete the dependent ConfigMap within 30s\n"
            + controller_manager.log_tail("kube-controller-manager")
        )
        time.sleep(0.25)


def _exists(core: client.CoreV1Api, name: str, namespace: str) -> bool:
    try:
        core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
