"""The committed CRD and the operator's RBAC as files, and whether the server serves the CRD."""

from pathlib import Path

from kubernetes import client

from autoscaler.api import coordinates as c

CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "kubeflow.org_pytorchjobs.yaml"
RBAC_FILE = CRD_FILE.parents[1] / "operator" / "rbac.yaml"


def established(ext: client.ApiextensionsV1Api) -> bool:
    crd = ext.read_custom_resource_definition(c.CRD_NAME)
    return any(
        cond.type == "Established" and cond.status == "True" for cond in crd.status.conditions or []
    )
