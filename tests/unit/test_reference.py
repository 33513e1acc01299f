"""The generated reference docs are current, and the published snapshot schema parses examples."""

import json
from pathlib import Path

from autoscaler.api.annotations import JobAnnotations
from autoscaler.cli.reference import annotations, configuration, snapshot_schema
from autoscaler.policies.contract import Snapshot

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_checked_in_reference_is_current() -> None:
    assert (DOCS / "snapshot.schema.json").read_text() == snapshot_schema(), "run `make docs`"
    assert (DOCS / "configuration.md").read_text() == configuration(), "run `make docs`"
    assert (DOCS / "annotations.md").read_text() == annotations(), "run `make docs`"


def test_snapshot_schema_names_the_public_fields() -> None:
    schema = json.loads(snapshot_schema())
    job = schema["$defs"]["JobSnapshot"]["properties"]
    assert {"capacity", "jobs"} <= set(schema["properties"])
    assert {
        "namespace", "name", "min_replicas", "max_replicas", "replicas", "resources_per_replica",
        "weight", "throughput", "age_seconds", "seconds_since_rescale",
    } <= set(job)  # fmt: skip


def test_throughput_keys_are_counts_in_json() -> None:
    text = '{"capacity": {"nvidia.com/gpu": 4}, "jobs": [{"namespace": "n", "name": "j", "min_replicas": 1, "max_replicas": 4, "replicas": 2, "throughput": {"2": 10.5}, "extra": 1}]}'
    snapshot = Snapshot.model_validate_json(text)
    assert snapshot.jobs[0].throughput == {2: 10.5}
    assert snapshot.jobs[0].weight == 1.0


def test_the_annotations_reference_has_a_row_per_declared_annotation() -> None:
    rows = [line for line in annotations().splitlines() if line.startswith("| `")]
    keys = [field.alias for field in JobAnnotations.model_fields.values()]
    assert [row.split("`")[1] for row in rows] == keys
    assert all(row.count(" | ") == 5 for row in rows)  # six cells, no stray `|` in a value
