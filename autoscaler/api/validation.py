"""Offline validation of a PyTorchJob manifest, as the API server judges it.

In the API server's order (kube-apiserver 1.36, measured by `make fuzz`):
1. decoding: a value ObjectMeta's Go type cannot hold, else unknown fields (ObjectMeta's too,
   null ones too; strict field validation), refuse the object with those alone;
2. ObjectMeta's own rules (a name, a DNS-1123 subdomain) and the structural schema of the generated
   CRD (types, int32/int64 formats, enums, bounds, patterns, required fields);
3. the CEL rules, through their Python twins, on the object with the schema's defaults applied,
   unless step 2 found an error of a blocking kind (a wrong type, a missing field, a value not in
   an enum, too long, too many): then one root error says the rules were not checked.
Fields and messages are worded as the API server words them (`details.causes`), so offline and
online answers agree.
"""

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.api.crd import job_schema, openapi_types
from autoscaler.api.rules import RULES, Rule

JSON = dict[str, Any]
REASON_TEXT = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
}
OBJECT_META = ".metadata"  # validated by the API server's own ObjectMeta rules, not the schema
OBJECT_META_TYPE = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
DNS_1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{DNS_1123_SUBDOMAIN}')"
)
RULES_NOT_CHECKED = (
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation"
)
INT_FORMATS = {"int32": 2**31, "int64": 2**63}  # format -> the first value out of range
# The kinds of error that keep the API server from evaluating the CEL rules (apiextensions'
# hasBlockingErr), and the kind its strict decoding refuses before any validation.
TYPE_INVALID, REQUIRED, NOT_SUPPORTED, TOO_LONG, TOO_MANY = (
    "TypeInvalid",
    "Required",
    "NotSupported",
    "TooLong",
    "TooMany",
)
BLOCKING = frozenset({TYPE_INVALID, REQUIRED, NOT_SUPPORTED, TOO_LONG, TOO_MANY})
UNKNOWN_FIELD = "UnknownField"
DECODE = "Decode"  # a body the API server cannot decode: refused with that error alone
JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


@dataclass(frozen=True, kw_only=True)
class FieldError:
    field: str
    message: str
    kind: str = "Invalid"  # the API server's error type: whether it blocks the CEL rules

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def validate(manifest: JSON, *, old: JSON | None = None) -> list[FieldError]:
    """The errors the API server reports for creating `manifest` (or updating `old` to it)."""
    schema = _schema()
    errors = [
        *_metadata_errors(manifest.get("metadata")),
        *_schema_errors(manifest, schema=schema, path=""),
        *_scale_errors(manifest),
    ]
    for refused_first in (DECODE, UNKNOWN_FIELD):
        refused = [error for error in errors if error.kind == refused_first]
        if refused:
            return refused
    if any(error.kind in BLOCKING for error in errors):
        return [*errors, FieldError(field="<nil>", message=RULES_NOT_CHECKED)]
    new = apply_defaults(prune_nulls(manifest), schema=schema)
    previous = apply_defaults(prune_nulls(old), schema=schema) if old is not None else None
    return errors + [error for rule in RULES for error in _rule_errors(rule, new=new, old=previous)]


def _metadata_errors(metadata: Any) -> list[FieldError]:
    """ObjectMeta's rules that a manifest file can break: its Go types (decoding), unknown
    fields, the name."""
    if metadata is not None and not isinstance(metadata, dict):
        return [_decode_error("metadata", metadata, "Go value of type v1.ObjectMeta")]
    metadata = metadata or {}
    known = openapi_types()[OBJECT_META_TYPE]["properties"]
    wrong = [
        _decode_error(f"metadata.{key}", value, f"Go struct field ObjectMeta.{key}")
        for key, value in metadata.items()
        if value is not None
        and not _is_type(value, known.get(key, {}).get("type", "object,string"))
    ]
    if wrong:
        return wrong
    errors = [
        FieldError(
            field=f"metadata.{key}", message=f'unknown field "metadata.{key}"', kind=UNKNOWN_FIELD
        )
        for key in metadata
        if key not in known
    ]
    name = metadata.get("name")
    if not name and not metadata.get("generateName"):
        message = "Required value: name or generateName is required"
        errors.append(FieldError(field="metadata.name", message=message, kind=REQUIRED))
    elif isinstance(name, str) and not re.fullmatch(DNS_1123_SUBDOMAIN, name):
        message = f"Invalid value: {json.dumps(name)}: {SUBDOMAIN_HELP}"
        errors.append(FieldError(field="metadata.name", message=message))
    return errors


@cache
def _schema() -> JSON:
    """The CRD's schema, generated once per process (read-only here)."""
    return job_schema()


def prune_nulls(value: Any) -> Any:
    """Null fields are dropped before defaulting, as the API server does for non-nullable fields."""
    if isinstance(value, dict):
        return {key: prune_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [prune_nulls(item) for item in value]
    return value


def apply_defaults(value: Any, *, schema: JSON) -> Any:
    """The schema's `default`s, applied where the API server applies them."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for key, sub in schema["properties"].items():
            if out.get(key) is None and "default" in sub:
                out[key] = sub["default"]
            if key in out:
                out[key] = apply_defaults(out[key], schema=sub)
        return out
    extra = schema.get("additionalProperties")
    if isinstance(value, dict) and isinstance(extra, dict):
        return {key: apply_defaults(item, schema=extra) for key, item in value.items()}
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(item, schema=schema["items"]) for item in value]
    return value


def _rule_errors(rule: Rule, *, new: JSON, old: JSON | None) -> list[FieldError]:
    if rule.transition and old is None:
        return []
    errors = []
    for path, node, old_node in _nodes_at(rule.at, new=new, old=old, path=""):
        if rule.transition and old_node is None:
            continue
        message = rule.twin(node, old_node)
        if message is not None:
            field = _join(path, _cel_field_path(rule.field_path)) or "<nil>"
            text = f"{REASON_TEXT[rule.reason]}: {_shown_value(node)}{message}"
            errors.append(FieldError(field=field, message=text))
    return errors


def _shown_value(node: Any) -> str:
    """The API server quotes the value of a scalar a rule rejects; objects are not shown."""
    return "" if isinstance(node, (dict, list)) else f"{json.dumps(node)}: "


def _cel_field_path(field_path: str) -> str:
    """`['Master'].replicas` is reported as `[Master].replicas`, as the API server does."""
    return re.sub(r"\['([^']*)'\]", r"[\1]", field_path)


def _join(path: str, suffix: str) -> str:
    return (path + suffix).lstrip(".")


def _nodes_at(at: tuple[str, ...], *, new: Any, old: Any, path: str) -> list[tuple[str, Any, Any]]:
    """The (path, node, old node) triples a rule anchored at `at` applies to."""
    if not at:
        return [(path, new, old)]
    key, rest = at[0], at[1:]
    if not isinstance(new, dict):
        return []
    old_map = old if isinstance(old, dict) else {}
    if key == "*":
        return [
            node
            for name, value in new.items()
            for node in _nodes_at(rest, new=value, old=old_map.get(name), path=f"{path}[{name}]")
        ]
    if key not in new:
        return []
    return _nodes_at(rest, new=new[key], old=old_map.get(key), path=f"{path}.{key}")


def _schema_errors(value: Any, *, schema: JSON, path: str) -> list[FieldError]:
    field = path.lstrip(".")
    expected = _expected_type(schema)
    if expected is not None and not _is_type(value, expected):
        shown = _json_type(value)
        message = f'Invalid value: "{shown}": {field} in body must be of type {expected}: "{shown}"'
        return [FieldError(field=field, message=message, kind=TYPE_INVALID)]
    errors = _value_errors(value, schema=schema, field=field)
    if isinstance(value, dict):
        errors += _object_errors(value, schema=schema, path=path)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += _schema_errors(item, schema=schema["items"], path=f"{path}[{index}]")
    return errors


INT_OR_STRING = "integer,string"  # as the API server names the types it accepts


def _expected_type(schema: JSON) -> str | None:
    if schema.get("x-kubernetes-int-or-string"):
        return INT_OR_STRING if "type" not in schema else str(schema["type"])
    return schema.get("type")


def _is_type(value: Any, expected: str) -> bool:
    if isinstance(value, bool):
        return expected == "boolean"
    return any(isinstance(value, JSON_TYPES[name]) for name in expected.split(","))


def _json_type(value: Any) -> str:
    return next(name for name in JSON_TYPES if _is_type(value, name))


def _value_errors(value: Any, *, schema: JSON, field: str) -> list[FieldError]:
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{choice}"' for choice in schema["enum"])
        return [
            FieldError(
                field=field,
                message=f'Unsupported value: "{value}": supported values: {supported}',
                kind=NOT_SUPPORTED,
            )
        ]
    return _format_errors(value, schema=schema, field=field) + [
        FieldError(field=field, message=message, kind=kind)
        for kind, message in _bound_violations(value, schema=schema, field=field)
    ]


def _format_errors(value: Any, *, schema: JSON, field: str) -> list[FieldError]:
    """An integer outside its format's range: a root error naming the field."""
    limit = INT_FORMATS.get(schema.get("format", ""))
    if limit is None or not isinstance(value, int) or -limit <= value < limit:
        return []
    message = (
        f'Invalid value: "": Checked value must be of type integer with format {schema["format"]} '
        f"in {field}"
    )
    return [FieldError(field="<nil>", message=message)]


def _scale_errors(manifest: JSON) -> list[FieldError]:
    """The /scale subresource's own check of the spec replicas path, which the API server runs on
    every write (written at the path as the CRD spells it, leading dot included)."""
    node: Any = manifest
    keys = c.SCALE_SPEC_REPLICAS_PATH.lstrip(".").split(".")
    for depth, key in enumerate(keys):
        where = "." + ".".join(keys[: depth + 1])
        if not isinstance(node, dict):
            shown = ".".join(keys[:depth]) or "the object"
            problem = f".{shown} accessor error: {_json_type(node)}, expected map"
            return [_scale_error(0, problem)]
        if key not in node or node[key] is None:
            return []
        node = node[key]
        if depth == len(keys) - 1 and not (isinstance(node, int) and not isinstance(node, bool)):
            return [_scale_error(0, f"{where} accessor error: {_json_type(node)}, expected int64")]
    if node < 0:
        return [_scale_error(node, "should be a non-negative integer")]
    if node >= INT_FORMATS["int32"]:
        return [_scale_error(node, f"should be less than or equal to {INT_FORMATS['int32'] - 1}")]
    return []


def _scale_error(value: int, problem: str) -> FieldError:
    return FieldError(
        field=c.SCALE_SPEC_REPLICAS_PATH, message=f"Invalid value: {value}: {problem}"
    )


def _bound_violations(value: Any, *, schema: JSON, field: str) -> list[tuple[str, str]]:
    """(kind, message) of each bound `value` breaks, worded as the API server words them."""
    found = []

    def invalid(shown: str, text: str) -> None:
        found.append(("Invalid", f"Invalid value: {shown}: {field} in body should {text}"))

    if isinstance(value, int) and not isinstance(value, bool):
        if value < schema.get("minimum", value):
            invalid(str(value), f"be greater than or equal to {schema['minimum']}")
        if value > schema.get("maximum", value):
            invalid(str(value), f"be less than or equal to {schema['maximum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        invalid(f'"{value}"', f"match '{schema['pattern']}'")
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        found.append((TOO_LONG, f"Too long: may not be more than {schema['maxLength']} bytes"))
    unit, low, high = (
        ("items", "minItems", "maxItems")
        if isinstance(value, list)
        else ("properties", "minProperties", "maxProperties")
    )
    if isinstance(value, (list, dict)):
        if len(value) < schema.get(low, 0):
            invalid(str(len(value)), f"have at least {schema[low]} {unit}")
        if len(value) > schema.get(high, len(value)):
            message = f"Too many: {len(value)}: must have at most {schema[high]} items"
            found.append((TOO_MANY, message))
    return found


def _unknown_nulls(value: JSON, *, schema: JSON, path: str) -> list[FieldError]:
    properties = schema.get("properties")
    if (
        properties is None
        or schema.get("x-kubernetes-preserve-unknown-fields")
        or path == OBJECT_META
    ):
        return []
    return [
        _unknown_field(_join(path, f".{key}"))
        for key, item in value.items()
        if item is None and key not in properties
    ]


def _unknown_field(field: str) -> FieldError:
    return FieldError(field=field, message=f'unknown field "{field}"', kind=UNKNOWN_FIELD)


def _decode_error(field: str, value: Any, target: str) -> FieldError:
    """A value the API server cannot decode into ObjectMeta's Go type (its 400, before all)."""
    shown = {"object": "object", "array": "array", "string": "string", "boolean": "bool"}.get(
        _json_type(value), "number"
    )
    return FieldError(
        field=field, message=f"json: cannot unmarshal {shown} into {target}", kind=DECODE
    )


def _object_errors(value: JSON, *, schema: JSON, path: str) -> list[FieldError]:
    present = {key: item for key, item in value.items() if item is not None}
    # Strict decoding refuses an unknown field even when null: it is looked up before pruning.
    errors = _unknown_nulls(value, schema=schema, path=path) + [
        FieldError(field=_join(path, f".{key}"), message="Required value", kind=REQUIRED)
        for key in schema.get("required", [])
        if key not in present
    ]
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for key, item in present.items():
        if properties is not None and key in properties:
            errors += _schema_errors(item, schema=properties[key], path=f"{path}.{key}")
        elif isinstance(extra, dict):
            errors += _schema_errors(item, schema=extra, path=f"{path}.{key}")
        elif not schema.get("x-kubernetes-preserve-unknown-fields") and path != OBJECT_META:
            field = _join(path, f".{key}")
            errors.append(_unknown_field(field))
    return errors
