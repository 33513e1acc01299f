"""The committed CRD is exactly what the generator makes, and has the shape users rely on."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

from autoscaler.api import coordinates as c
from autoscaler.api.crd import crd, job_schema, node_at
from autoscaler.api.rules import RULES

CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "kubeflow.org_pytorchjobs.yaml"
# kubectl's client-side apply stores the object in an annotation limited to 256 KiB.
LAST_APPLIED_LIMIT = 262144


def test_committed_crd_equals_generated_output() -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "autoscaler", "manifests", "crd"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert CRD_FILE.read_text() == generated, "run `make crd` and commit the result"


def test_crd_fits_client_side_apply() -> None:
    assert len(json.dumps(crd(), separators=(",", ":"))) < LAST_APPLIED_LIMIT


def test_every_rule_is_attached_where_it_is_anchored() -> None:
    schema = job_schema()
    attached = [
        rule.rule
        for rule in RULES
        if rule.to_schema() in node_at(schema, rule.at).get("x-kubernetes-validations", [])
    ]
    assert attached == [rule.rule for rule in RULES]


def test_pod_template_is_the_real_pod_template_schema() -> None:
    template = node_at(job_schema(), ("spec", "pytorchReplicaSpecs", "*", "template"))
    containers = template["properties"]["spec"]["properties"]["containers"]
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    assert containers["items"]["required"] == ["name"]
    assert "x-kubernetes-preserve-unknown-fields" not in template


def test_persisted_defaults_are_only_the_documented_ones() -> None:
    defaults = sorted(_defaults(job_schema()["properties"]["spec"], path="spec"))
    assert [d for d in defaults if ".template." not in d] == [
        "spec.pytorchReplicaSpecs.*.replicas=1",
        "spec.pytorchReplicaSpecs.*.restartPolicy=OnFailure",
        "spec.runPolicy.suspend=False",
        "spec.runPolicy={}",
    ]


def _defaults(schema: dict[str, object], *, path: str) -> list[str]:
    found = [f"{path}={schema['default']}"] if "default" in schema else []
    properties = schema.get("properties", {})
    assert isinstance(properties, dict)
    for key, sub in properties.items():
        found += _defaults(sub, path=f"{path}.{key}")
    for key in ("additionalProperties", "items"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            found += _defaults(sub, path=f"{path}.*")
    return found


def test_file_is_a_single_crd_document() -> None:
    documents = list(yaml.safe_load_all(CRD_FILE.read_text()))
    assert [d["metadata"]["name"] for d in documents] == [c.CRD_NAME]
