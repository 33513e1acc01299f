"""Refresh `autoscaler/api/openapi/k8s-types.json` from the pinned kube-apiserver (`make openapi`).

Starts the test control plane, reads its OpenAPI v3 documents and keeps the closure of the types
the CRD embeds (PodTemplateSpec, MetricSpec, LabelSelector), so the CRD is generated offline.
"""

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.controlplane import ControlPlane, binaries_dir
from tests.support.processes import http_get

ROOTS = (
    "io.k8s.api.core.v1.PodTemplateSpec",
    "io.k8s.api.autoscaling.v2.MetricSpec",
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
)
DOCUMENTS = ("api/v1", "apis/autoscaling/v2")


def fetch_schemas(plane: ControlPlane) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for document in DOCUMENTS:
        status, body = http_get(f"{plane.url}/openapi/v3/{document}", token=plane.token, timeout=30)
        if status != 200:
            raise RuntimeError(f"GET /openapi/v3/{document}: HTTP {status}")
        schemas.update(json.loads(body)["components"]["schemas"])
    return schemas


def closure(schemas: dict[str, Any], roots: tuple[str, ...]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name not in kept:
            kept[name] = schemas[name]
            pending.extend(_refs(schemas[name]))
    return dict(sorted(kept.items()))


def _refs(node: Any) -> list[str]:
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["$ref"].split("/")[-1]] if "$ref" in node else []
    return own + [ref for value in node.values() for ref in _refs(value)]


def main(out: Path) -> None:
    plane = ControlPlane(bin_dir=binaries_dir())
    with tempfile.TemporaryDirectory(prefix="openapi-") as workdir:
        plane.start(Path(workdir) / "cp")
        try:
            types = closure(fetch_schemas(plane), ROOTS)
        finally:
            plane.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(types, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(types)} types to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
