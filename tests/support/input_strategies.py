"""Hypothesis strategies for the files the CLI reads besides job manifests: `decide`'s snapshots,
`engine`'s configs and `simulate`'s workloads. Each input is a valid document with at most one
field broken (a wrong type, a value out of range, removed, an unknown key), or a document that
is no such file at all; it carries the field name a refusal must mention (None: none applies)."""

import json
from typing import Any

import yaml
from hypothesis import strategies as st

JSON = dict[str, Any]
BAD_VALUES = st.sampled_from(
    [-1, 0, 0.5, 10**30, "x", "", None, True, [], {}, float("nan"), float("inf")]
)
NOT_A_DOCUMENT = ["", "[]", "null", "42", "{", "]]", '"text"', "\x00"]

SNAPSHOT_JOB: JSON = {
    "namespace": "default",
    "name": "a",
    "min_replicas": 1,
    "max_replicas": 4,
    "replicas": 2,
    "resources_per_replica": {"nvidia.com/gpu": 1},
    "weight": 1.0,
    "throughput": {"1": 10.0, "2": 19.0},
    "throughput_age_seconds": {"1": 5.0},
    "age_seconds": 600.0,
    "seconds_since_rescale": 300.0,
    "restart_seconds": 30.0,
    "restarts_remaining": 10,
    "remaining_samples": 100000.0,
    "attained_seconds": 1200.0,
    "requested_replicas": 2,
    "allowed_replicas": [1, 2, 4],
}
SNAPSHOT: JSON = {
    "capacity": {"nvidia.com/gpu": 8},
    "jobs": [SNAPSHOT_JOB, {**SNAPSHOT_JOB, "name": "b", "replicas": 1}],
}
ENGINE_CONFIG: JSON = {
    "interval_seconds": 30,
    "namespaces": ["team-a"],
    "policy": {"name": "global-optimizer", "config": {}, "timeout_seconds": 10},
    "prometheus": {"url": "http://prometheus:9090", "window": "2m", "timeout_seconds": 5},
    "settle": {"settle_seconds": 180, "cooldown_seconds": 180, "scale_down_max_percent": 50},
    "capacity": {"nvidia.com/gpu": 8},
    "restart_seconds": 30,
    "state_save_seconds": 300,
}
WORKLOAD_HEADER = [
    "name",
    "submit_time",
    "profile",
    "batch_size",
    "iterations",
    "min_replicas",
    "max_replicas",
    "replicas",
    "gpus_per_replica",
    "weight",
]
WORKLOAD_ROW = ["vgg16-a", "0", "vgg16", "256", "100", "1", "8", "2", "1", "1"]


def leaf_paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value of the document (maps and lists included, as a whole)."""
    paths = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            paths += leaf_paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            paths += leaf_paths(value, (*prefix, index))
    return paths


def _named(path: tuple[Any, ...]) -> str | None:
    """The innermost name on the path (a list index or a count as key names nothing)."""
    names = [part for part in path if isinstance(part, str) and not part.isdigit()]
    return names[-1] if names else None


def _broken(document: Any, path: tuple[Any, ...], how: str, value: Any) -> tuple[Any, str | None]:
    """The document with the field at `path` broken `how`, and the name a refusal must say."""
    out = json.loads(json.dumps(document))
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    if how == "remove" and isinstance(parent, dict):
        del parent[path[-1]]
    elif how == "unknown-key" and isinstance(parent[path[-1]], dict):
        parent[path[-1]]["unknown_key"] = 1
        return out, "unknown_key"
    else:
        parent[path[-1]] = value
    return out, _named(path)


@st.composite
def broken_documents(draw: st.DrawFn, document: JSON) -> tuple[Any, str | None]:
    """(document with one field broken, the field's name), or the document unchanged."""
    if draw(st.integers(0, 9)) == 0:
        return document, None
    path = draw(st.sampled_from(leaf_paths(document)))
    how = draw(st.sampled_from(["value", "value", "remove", "unknown-key"]))
    return _broken(document, path, how, draw(BAD_VALUES))


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[str, str | None]:
    """A snapshot file's text (JSON, NaN and Infinity included) and the broken field's name."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(NOT_A_DOCUMENT)), None
    document, name = draw(broken_documents(SNAPSHOT))
    return json.dumps(document), name


@st.composite
def engine_configs(draw: st.DrawFn) -> tuple[str, str | None]:
    """An engine config file's text (YAML) and the broken field's name."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(NOT_A_DOCUMENT)), None
    document, name = draw(broken_documents(ENGINE_CONFIG))
    return yaml.safe_dump(document), name


@st.composite
def workloads(draw: st.DrawFn) -> tuple[str, str | None]:
    """A workload CSV's text and the column a refusal must name (None: the line or file)."""
    header, rows = (
        list(WORKLOAD_HEADER),
        [list(WORKLOAD_ROW), [*WORKLOAD_ROW[:1], *WORKLOAD_ROW[1:]]],
    )
    rows[1][0] = "vgg16-b"
    name: str | None = None
    how = draw(st.sampled_from(["cell", "cell", "cell", "header", "row-length", "none", "empty"]))
    if how == "cell":
        column = draw(st.integers(0, len(header) - 1))
        text = draw(
            st.sampled_from(
                ["", "-1", "0", "x", "1e999", "nan", "inf", "1.5", str(10**30), "Name_"]
            )
        )
        rows[draw(st.integers(0, 1))][column] = text
        name = header[column]
    elif how == "header":
        column = draw(st.integers(0, len(header) - 1))
        header[column] = draw(st.sampled_from(["", "unknown", header[(column + 1) % len(header)]]))
    elif how == "row-length":
        rows[0] = rows[0][:-1] if draw(st.booleans()) else [*rows[0], "1"]
    elif how == "empty":
        return draw(st.sampled_from(["", "\n", ",".join(header) + "\n"])), None
    return "\n".join(",".join(row) for row in [header, *rows]) + "\n", name
