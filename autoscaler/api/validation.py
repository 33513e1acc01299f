"""Offline validation of a PyTorchJob manifest, as the API server judges it.

Two layers, like the API server's: the structural schema of the generated CRD (types, enums,
bounds, patterns, required and unknown fields), then, on a schema-valid object with the schema's
defaults applied, the CEL rules through their Python twins. Fields and messages are worded as the
API server words them (`details.causes`), so offline and online answers agree.
"""

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from autoscaler.api.crd import job_schema
from autoscaler.api.rules import RULES, Rule

JSON = dict[str, Any]
REASON_TEXT = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
}
OBJECT_META = ".metadata"  # validated by the API server's own ObjectMeta rules, not the schema
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

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def validate(manifest: JSON, *, old: JSON | None = None) -> list[FieldError]:
    """The errors the API server reports for creating `manifest` (or updating `old` to it)."""
    schema = _schema()
    errors = _schema_errors(manifest, schema=schema, path="")
    if errors:
        return errors
    new = apply_defaults(prune_nulls(manifest), schema=schema)
    previous = apply_defaults(prune_nulls(old), schema=schema) if old is not None else None
    return [error for rule in RULES for error in _rule_errors(rule, new=new, old=previous)]


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
        return [FieldError(field=field, message=message)]
    errors = _value_errors(value, schema=schema, field=field)
    if isinstance(value, dict):
        errors += _object_errors(value, schema=schema, path=path)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += _schema_errors(item, schema=schema["items"], path=f"{path}[{index}]")
    return errors


def _expected_type(schema: JSON) -> str | None:
    if schema.get("x-kubernetes-int-or-string"):
        return None if "type" not in schema else str(schema["type"])
    return schema.get("type")


def _is_type(value: Any, expected: str) -> bool:
    if isinstance(value, bool):
        return expected == "boolean"
    return isinstance(value, JSON_TYPES[expected])


def _json_type(value: Any) -> str:
    return next(name for name in JSON_TYPES if _is_type(value, name))


def _value_errors(value: Any, *, schema: JSON, field: str) -> list[FieldError]:
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{choice}"' for choice in schema["enum"])
        return [
            FieldError(
                field=field, message=f'Unsupported value: "{value}": supported values: {supported}'
            )
        ]
    return [
        FieldError(field=field, message=f"Invalid value: {shown}: {field} in body should {text}")
        for shown, text in _bound_violations(value, schema=schema)
    ]


def _bound_violations(value: Any, *, schema: JSON) -> list[tuple[str, str]]:
    found = []
    if isinstance(value, int) and not isinstance(value, bool):
        if value < schema.get("minimum", value):
            found.append((str(value), f"be greater than or equal to {schema['minimum']}"))
        if value > schema.get("maximum", value):
            found.append((str(value), f"be less than or equal to {schema['maximum']}"))
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        found.append((f'"{value}"', f"match '{schema['pattern']}'"))
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        found.append((f'"{value}"', f"be at most {schema['maxLength']} chars long"))
    unit, low, high = (
        ("items", "minItems", "maxItems")
        if isinstance(value, list)
        else ("properties", "minProperties", "maxProperties")
    )
    if isinstance(value, (list, dict)):
        if len(value) < schema.get(low, 0):
            found.append((str(len(value)), f"have at least {schema[low]} {unit}"))
        if len(value) > schema.get(high, len(value)):
            found.append((str(len(value)), f"have at most {schema[high]} {unit}"))
    return found


def _object_errors(value: JSON, *, schema: JSON, path: str) -> list[FieldError]:
    present = {key: item for key, item in value.items() if item is not None}
    errors = [
        FieldError(field=_join(path, f".{key}"), message="Required value")
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
            errors.append(FieldError(field=field, message=f'unknown field "{field}"'))
    return errors
