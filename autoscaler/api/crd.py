"""The PyTorchJob CRD, generated from the models, the rules and the API server's own types.

Pod templates and HPA metrics use the real `PodTemplateSpec` and `MetricSpec` schemas, taken from
the pinned kube-apiserver's OpenAPI (`openapi/*.json`, refreshed by `make openapi`), so a typo in
a template is rejected at `kubectl apply` with the server's own message, as upstream does.
"""

import json
from functools import cache
from importlib import resources
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api.models import PyTorchJob
from autoscaler.api.rules import RULES

JSON = dict[str, Any]
OPENAPI_MARKER = "x-autoscaler-openapi"
OPENAPI_SNAPSHOT = "openapi/k8s-types.json"
# Kept from pydantic's JSON schema; everything else (title, $defs, null defaults) is dropped.
SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "default",
        "enum",
        "minimum",
        "maximum",
        "pattern",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-embedded-resource",
    }
)


@cache
def openapi_types() -> JSON:
    text = resources.files("autoscaler.api").joinpath(OPENAPI_SNAPSHOT).read_text()
    types: JSON = json.loads(text)
    return types


def crd() -> JSON:
    """The CustomResourceDefinition manifest, deterministic for a given source tree."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": c.CRD_NAME},
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": c.KIND,
                "listKind": c.LIST_KIND,
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
            },
            "scope": "Namespaced",
            "versions": [version()],
        },
    }


def version() -> JSON:
    return {
        "name": c.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": job_schema()},
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": c.SCALE_SPEC_REPLICAS_PATH,
                "statusReplicasPath": c.SCALE_STATUS_REPLICAS_PATH,
                "labelSelectorPath": c.SCALE_LABEL_SELECTOR_PATH,
            },
        },
        "additionalPrinterColumns": [
            {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
            {"name": "Workers", "type": "integer", "jsonPath": c.SCALE_SPEC_REPLICAS_PATH},
            {"name": "Active", "type": "integer", "jsonPath": c.SCALE_STATUS_REPLICAS_PATH},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }


# Bounds the CEL cost estimator needs where the rules iterate over containers; the API server
# allows any number of containers and any image length, but no real pod comes near these.
CONTAINER_BOUNDS = {"maxItems": 64}
CONTAINER_FIELD_BOUNDS = {"name": {"maxLength": 63}, "image": {"maxLength": 4096}}


def job_schema() -> JSON:
    pydantic_schema = PyTorchJob.model_json_schema(by_alias=True, mode="validation")
    schema = structural(pydantic_schema, defs=pydantic_schema.get("$defs", {}))
    # Only name constraints are allowed on a custom resource's metadata.
    schema["properties"]["metadata"] = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 63}},
    }
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    schema["required"] = ["spec"]
    schema["description"] = "PyTorchJob runs a (possibly elastic) PyTorch training job."
    containers = node_at(
        schema, ("spec", "pytorchReplicaSpecs", "*", "template", "spec", "containers")
    )
    containers.update(CONTAINER_BOUNDS)
    for field, bounds in CONTAINER_FIELD_BOUNDS.items():
        containers["items"]["properties"][field].update(bounds)
    for rule in RULES:
        node = node_at(schema, rule.at)
        node.setdefault("x-kubernetes-validations", []).append(rule.to_schema())
    return schema


def node_at(schema: JSON, path: tuple[str, ...]) -> JSON:
    """The schema node at a path of property names; `*` steps into map values."""
    node = schema
    for key in path:
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    return node


def structural(schema: JSON, *, defs: JSON) -> JSON:
    """A pydantic JSON schema turned into a Kubernetes structural schema (no refs, no anyOf)."""
    if "$ref" in schema:
        return structural(
            {**defs[schema["$ref"].split("/")[-1]], **_without(schema, "$ref")}, defs=defs
        )
    if OPENAPI_MARKER in schema:
        return kubernetes_type(schema[OPENAPI_MARKER])
    if "anyOf" in schema:
        branches = [branch for branch in schema["anyOf"] if branch.get("type") != "null"]
        merged = {**branches[0], **_without(schema, "anyOf")} if len(branches) == 1 else schema
        return structural(merged, defs=defs)
    out: JSON = {key: value for key, value in schema.items() if key in SCHEMA_KEYS}
    if out.get("default", 0) is None:
        del out["default"]
    if "properties" in out:
        out["properties"] = {k: structural(v, defs=defs) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = structural(out[key], defs=defs) if out[key] else {}
    if out.get("additionalProperties") is True:
        del out["additionalProperties"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _without(schema: JSON, key: str) -> JSON:
    """The schema's own keywords without `key`, its title and pydantic's `default: null`."""
    return {
        k: v
        for k, v in schema.items()
        if k not in (key, "title") and not (k == "default" and v is None)
    }


def kubernetes_type(name: str) -> JSON:
    """An API server type from the snapshot, made structural: refs inlined, descriptions and
    zero-value defaults dropped, informational enums dropped (the pod's own validation judges
    values when the operator creates it, as upstream's controller-gen schema does)."""
    types = openapi_types()
    return _drop_zero_defaults(_inline(types[name], types=types))


def _inline(schema: JSON, *, types: JSON) -> JSON:
    if len(schema.get("allOf", ())) == 1:
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return _inline({**schema["allOf"][0], **rest}, types=types)
    if "$ref" in schema:
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _inline({**types[schema["$ref"].split("/")[-1]], **rest}, types=types)
    if "oneOf" in schema:  # Quantity and IntOrString
        return {"x-kubernetes-int-or-string": True}
    out = {k: v for k, v in schema.items() if k in SCHEMA_KEYS - {"description", "enum"}}
    if "properties" in out:
        out["properties"] = {k: _inline(v, types=types) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _inline(out[key], types=types)
    if (
        out.get("type") == "object"
        and not out.get("properties")
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True  # FieldsV1: free-form by design
    return out


def _drop_zero_defaults(schema: JSON, *, keep: bool = False) -> JSON:
    """Zero-value defaults only mark Go's non-pointer fields; list-map keys must keep theirs."""
    out = dict(schema)
    if not keep and out.get("default") in ("", 0, False, {}, []):
        del out["default"]
    if "properties" in out:
        out["properties"] = {k: _drop_zero_defaults(v) for k, v in out["properties"].items()}
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _drop_zero_defaults(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        map_keys = set(out.get("x-kubernetes-list-map-keys", ()))
        items = dict(out["items"])
        items_properties = items.get("properties", {})
        out["items"] = _drop_zero_defaults(items)
        for key in map_keys & items_properties.keys():
            out["items"]["properties"][key] = _drop_zero_defaults(items_properties[key], keep=True)
    return out
