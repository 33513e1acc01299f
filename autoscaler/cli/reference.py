"""Reference docs generated from the models: the snapshot's JSON schema, the configuration and
the job annotations of the engine and the operator.

`make docs` writes them; a test checks the checked-in files are current.
"""

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from autoscaler.api.annotations import JobAnnotations, reader
from autoscaler.api.operator_annotations import OperatorAnnotations, setting
from autoscaler.engine.config import EngineConfig
from autoscaler.policies.contract import Snapshot
from autoscaler.policies.registry import installed, load_entry

JSON = dict[str, Any]


def snapshot_schema() -> str:
    schema = Snapshot.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Snapshot: what a policy sees"
    return json.dumps(schema, indent=2) + "\n"


def configuration() -> str:
    """Markdown tables of the engine's config file and of every built-in policy's config."""
    parts = [
        "# Configuration reference\n",
        "Generated from the pydantic models by `make docs`; do not edit by hand. Unknown keys are"
        " errors everywhere.\n",
        "## Engine (`autoscaler engine --config FILE`)\n",
        *_model_tables(EngineConfig),
        "## Policies (`policy.config` of the engine, `autoscaler decide --config`)\n",
    ]
    for name, entry in sorted(installed().items()):
        if entry.value.startswith("autoscaler."):  # built-ins; plug-ins document themselves
            plugin = load_entry(entry)
            parts += [
                f"### `{name}`\n",
                f"{plugin.summary}.\n",
                *_model_tables(plugin.config_model),
            ]
    return "\n".join(parts)


def annotations() -> str:
    """Markdown tables of the annotations the engine reads on a job (`JobAnnotations`), then
    of those the operator reads."""
    rows = [
        "| annotation | written by | value | default | meaning | an invalid value |",
        "|---|---|---|---|---|---|",
    ]
    for name, field in JobAnnotations.model_fields.items():
        how = reader(name)
        if how.report is None:
            invalid = how.judged or "none: every value is read"
        else:
            fallback = how.fallback_for(field.default)
            instead = "ignored" if fallback == field.default else f"read as {_json(fallback)}"
            invalid = f"{instead}, {how.report}"
        meaning = " ".join(str(field.description).split())
        cells = [f"`{field.alias}`", how.written_by, how.value, _json(field.default), meaning]
        rows.append(f"| {' | '.join([*cells, invalid])} |")
    return "\n".join(
        [
            "# Job annotations\n",
            "Generated from `autoscaler.api.annotations` and `autoscaler.api.operator_annotations`"
            " by `make docs`; do not edit by hand.\n",
            "## Read by the policy engine\n",
            "The policy engine reads these annotations on a PyTorchJob, each the same way: absent,"
            " it takes its default; invalid, it is ignored (the job is sized as if it were absent)"
            " or read as its last column says, and reported there. One Warning Event"
            " `InvalidAnnotation` names every problem of a job, once per change;"
            " `autoscaler validate -f job.yaml` prints them before the job is created.\n",
            "\n".join(rows) + "\n",
            *_operator_annotations(),
        ]
    )


def _operator_annotations() -> list[str]:
    """The annotations the operator reads on a job (`OperatorAnnotations`), by mode."""
    rows = [
        "| mode | annotation | value | default | meaning | an invalid value |",
        "|---|---|---|---|---|---|",
    ]
    for name, field in OperatorAnnotations.model_fields.items():
        how = setting(name)
        mode = f"[{how.mode.name}]({how.mode.page})"
        meaning = " ".join(str(field.description).split())
        invalid = f"condition `{how.mode.condition}` False, Warning Event `{how.mode.reason}`"
        cells = [mode, f"`{field.alias}`", how.value, _json(field.default), meaning, invalid]
        rows.append(f"| {' | '.join(cells)} |")
    return [
        "## Read by the operator\n",
        "The operator reads these annotations on a PyTorchJob to run a mode beside its workers;"
        " absent, each takes its default. An invalid value, or a job its mode cannot run, sets"
        " the mode's condition False and a Warning Event of its reason says why, once per change;"
        " no pods are created until it is fixed.\n",
        "\n".join(rows) + "\n",
    ]


def _json(value: Any) -> str:
    return f"`{json.dumps(to_jsonable_python(value))}`"


def _model_tables(model: type[BaseModel]) -> list[str]:
    schema = model.model_json_schema()
    definitions = schema.get("$defs", {})
    tables = [_table(schema, definitions=definitions, title=None)]
    for name, definition in sorted(definitions.items()):
        if definition.get("type") == "object":
            tables.append(_table(definition, definitions=definitions, title=name))
    return tables


def _table(schema: JSON, *, definitions: JSON, title: str | None) -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    required = set(schema.get("required", []))
    for key, field in schema.get("properties", {}).items():
        default = _default(field, required=key in required)
        meaning = field.get("description") or definitions.get(_ref(field), {}).get(
            "description", ""
        )
        rows.append(f"| `{key}` | {_type(field)} | {default} | {' '.join(meaning.split())} |")
    heading = f"#### `{title}`\n\n" if title else ""
    return heading + "\n".join(rows) + "\n"


def _default(field: JSON, *, required: bool) -> str:
    if required:
        return "required"
    if "default" not in field:
        return "empty"
    if _ref(field):  # a nested section: its own table follows
        return "see below"
    return f"`{json.dumps(field['default'])}`"


def _ref(field: JSON) -> str:
    reference = field.get("$ref") or next(
        (part["$ref"] for part in field.get("anyOf", []) if "$ref" in part), ""
    )
    return str(reference).rsplit("/", 1)[-1]


def _type(field: JSON | bool) -> str:
    if isinstance(field, bool) or not field:
        return "any"
    if "$ref" in field:
        return f"`{_ref(field)}`"
    if "anyOf" in field:
        return " or ".join(_type(part) for part in field["anyOf"])
    if "enum" in field or "const" in field:
        return " \\| ".join(f"`{value}`" for value in field.get("enum", [field.get("const")]))
    return _container(field)


def _container(field: JSON) -> str:
    kind = field.get("type", "any")
    if kind == "array":
        return f"list of {_type(field.get('items', {}))}"
    if kind == "object" and "additionalProperties" in field:
        return f"map to {_type(field['additionalProperties'])}"
    return str(kind)


def write(directory: Path) -> None:
    (directory / "snapshot.schema.json").write_text(snapshot_schema())
    (directory / "configuration.md").write_text(configuration())
    (directory / "annotations.md").write_text(annotations())


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
