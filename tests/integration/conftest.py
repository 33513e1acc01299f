"""Fixtures for tests that need the PyTorchJob CRD installed in the real API server."""

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from autoscaler.api import coordinates as c

CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "kubeflow.org_pytorchjobs.yaml"


def wait_for(predicate: Any, *, timeout: float = 30.0, interval: float = 0.1, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def established(ext: client.ApiextensionsV1Api) -> bool:
    crd = ext.read_custom_resource_definition(c.CRD_NAME)
    return any(
        cond.type == "Established" and cond.status == "True" for cond in crd.status.conditions or []
    )


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
