"""The differential suite's comparison: what it normalises away and how it names differences."""

from typing import Any

import pytest

from tests.support.conformance import differences, normalised

JSON = dict[str, Any]


def env(*names: str) -> list[JSON]:
    return [{"name": n, "value": "1"} for n in names]


@pytest.mark.parametrize(
    ("ours", "theirs", "found"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1}, {"a": 2}, [(".a", 1, 2)]),
        ({"a": 1}, {}, [(".a", 1, None)]),
        ({"e": env("A", "B")}, {"e": env("A")}, [(".e[B]", {"name": "B", "value": "1"}, None)]),
        ({"e": env("A", "B")}, {"e": env("B", "A")}, [(".e(order)", ["A", "B"], ["B", "A"])]),
        ({"l": [1, 2]}, {"l": [1, 3]}, [(".l[1]", 2, 3)]),
        ({"l": [1, 2]}, {"l": [1]}, [(".l", [1, 2], [1])]),
        (
            {"c": [{"name": "x", "image": "i"}]},
            {"c": [{"name": "x", "image": "j"}]},
            [(".c[x].image", "i", "j")],
        ),
    ],
)
def test_differences(ours: JSON, theirs: JSON, found: list[tuple[str, Any, Any]]) -> None:
    assert differences(ours, theirs) == found


def test_normalised_drops_what_the_server_sets_per_object() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "a",
            "uid": "1",
            "resourceVersion": "9",
            "creationTimestamp": "t",
            "managedFields": [],
            "labels": {"k": "v"},
            "ownerReferences": [{"kind": "PyTorchJob", "name": "j", "uid": "2"}],
        },
        "spec": {"x": 1},
        "status": {"phase": "Running"},
    }
    assert normalised(obj) == {
        "metadata": {
            "name": "p",
            "labels": {"k": "v"},
            "ownerReferences": [{"kind": "PyTorchJob", "name": "j"}],
        },
        "spec": {"x": 1},
    }
