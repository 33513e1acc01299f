"""Fixtures for tests that need the PyTorchJob CRD installed in the real API server."""

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller.runner import Operator, OperatorConfig
from tests.support.controlplane import RESTRICTED_USER, ControlPlane
from tests.support.crd import CRD_FILE, RBAC_FILE, established
from tests.support.polling import wait_for


@pytest.fixture(scope="session")
def crd(kube_api: client.ApiClient) -> dict[str, Any]:
    """The committed CRD, created from the file exactly as a user would, and Established."""
    manifest: dict[str, Any] = yaml.safe_load(CRD_FILE.read_text())
    ext = client.ApiextensionsV1Api(kube_api)
    ext.create_custom_resource_definition(manifest)
    wait_for(lambda: established(ext), what="the PyTorchJob CRD to be Established")
    return manifest


@pytest.fixture
def jobs(kube_api: client.ApiClient, crd: dict[str, Any]) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api)


@pytest.fixture(scope="session")
def controller_manager(crd: dict[str, Any], controller_manager: ControlPlane) -> ControlPlane:
    """kube-controller-manager, started only once the CRD is Established.

    Started before it, the garbage collector notices PyTorchJobs only at its next discovery
    resync (every 30 s), so deleting a job took ~40 s to cascade instead of ~0.1 s.
    """
    return controller_manager


@pytest.fixture(scope="session")
def operator_kubeconfig(kube_api: client.ApiClient, control_plane: ControlPlane) -> Path:
    """The restricted test user, bound to the operator's ClusterRole from deploy/operator."""
    role = next(d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d["kind"] == "ClusterRole")
    role["metadata"]["name"] = "pytorchjob-operator-test"  # the deploy test installs the original
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_cluster_role(role)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "pytorchjob-operator-test"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [
            {"kind": "User", "name": RESTRICTED_USER, "apiGroup": "rbac.authorization.k8s.io"}
        ],
    }
    rbac.create_cluster_role_binding(binding)
    return control_plane.kubeconfig_for(RESTRICTED_USER)


@pytest.fixture(scope="session")
def operator(crd: dict[str, Any], operator_kubeconfig: Path) -> Iterator[Operator]:
    """The operator, running in this process as the restricted user, for the whole session."""
    kube = Kube(api_client(kubeconfig=str(operator_kubeconfig)))
    config = OperatorConfig(workers=4, resync_seconds=1.0, watch_timeout=30)
    running = Operator(kube, config=config)
    stop = threading.Event()
    thread = threading.Thread(target=running.run, args=(stop,), name="operator", daemon=True)
    thread.start()
    wait_for(running.healthy, what="the operator's caches to sync")
    yield running
    stop.set()
    thread.join(timeout=60)
    kube.api.close()
