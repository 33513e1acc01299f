"""The differential suite's comparison: what it normalises away and how it names differences."""

from typing import Any

import pytest

from tests.support.conformance import differences, event_kinds, normalised, normalised_status

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


def cond(type_: str, status: str = "True") -> JSON:
    return {"type": type_, "status": status}


def test_conditions_are_compared_by_type_then_order() -> None:
    assert differences([cond("Created"), cond("Running")], [cond("Created")]) == [
        ("[Running]", cond("Running"), None)
    ]
    assert differences([cond("A"), cond("B")], [cond("B"), cond("A")]) == [
        ("(order)", ["A", "B"], ["B", "A"])
    ]
    # a type two items share names neither: compared by position
    assert differences([cond("A"), cond("A", "False")], [cond("A"), cond("A")]) == [
        ("[1].status", "False", "True")
    ]


def test_a_status_loses_its_times_and_names_its_namespace_alike() -> None:
    status = {
        "startTime": "t",
        "completionTime": "t",
        "lastReconcileTime": "t",
        "replicaStatuses": {"Worker": {"active": 1}},
        "conditions": [
            {
                "type": "Running",
                "status": "True",
                "reason": "PyTorchJobRunning",
                "message": "PyTorchJob ours/j is running; ours/ is a prefix, not fours/",
                "lastUpdateTime": "t",
                "lastTransitionTime": "t",
            }
        ],
    }
    assert normalised_status(status, "ours") == {
        "replicaStatuses": {"Worker": {"active": 1}},
        "conditions": [
            {
                "type": "Running",
                "status": "True",
                "reason": "PyTorchJobRunning",
                "message": "PyTorchJob <namespace>/j is running; <namespace>/ is a prefix, not fours/",
            }
        ],
    }
    assert normalised_status(None, "ours") == {}


def test_events_are_their_distinct_kinds() -> None:
    events = [
        {"type": "Normal", "reason": "SuccessfulCreatePod"},
        {"type": "Normal", "reason": "SuccessfulCreatePod"},
        {"type": "Warning", "reason": "PyTorchJobRestarting"},
    ]
    assert event_kinds(events) == {
        "Normal/SuccessfulCreatePod": True,
        "Warning/PyTorchJobRestarting": True,
    }
