"""The differential suite's comparison: what it normalises away, how it names differences, which
of them the documented ones explain, and that a recorded run of the suite fails when this
operator's side of it is deliberately broken."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.broken_plans import BREAKAGES, wrong_condition_reason
from tests.support.conformance import (
    differences,
    event_kinds,
    normalised,
    normalised_status,
    object_differences,
    observed_differences,
)
from tests.support.controlplane import REPO_ROOT
from tests.support.documented import DOCUMENTED, packing_of, undocumented

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
    assert event_kinds(events, "ours") == {
        "Normal/SuccessfulCreatePod": [""],
        "Warning/PyTorchJobRestarting": [""],
    }


def test_events_keep_their_distinct_messages_with_the_namespace_named_alike() -> None:
    events = [
        {"type": "Normal", "reason": "ExitedWithCode", "message": "Pod: ours.j-worker-1 exited"},
        {"type": "Normal", "reason": "ExitedWithCode", "message": "Pod: ours.j-worker-1 exited"},
        {"type": "Normal", "reason": "ExitedWithCode", "message": "Pod: ours.j-worker-0 exited"},
    ]
    assert event_kinds(events, "ours") == {
        "Normal/ExitedWithCode": [
            "Pod: <namespace>.j-worker-0 exited",
            "Pod: <namespace>.j-worker-1 exited",
        ]
    }


def pod(name: str, **spec: Any) -> JSON:
    return {"kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_an_object_on_one_side_only_is_a_difference_either_way() -> None:
    a, b = pod("j-worker-0"), pod("j-worker-1")
    assert object_differences([a, b], [a]) == [("Pod/j-worker-1", normalised(b), None)]
    assert object_differences([a], [a, b]) == [("Pod/j-worker-1", None, normalised(b))]


RDZV = "last_call_timeout=3,keep_alive_interval=2,keep_alive_max_attempt=3"
WHERE = "objects c: Pod/j-worker-0.spec.containers[pytorch].env[PET_RDZV_CONF]"
AFFINITY = "objects c: Pod/j-worker-1.spec.affinity"
PACKED = packing_of("j")
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
TERM = PACKED["podAffinity"][PREFERRED][0]


@pytest.mark.parametrize(
    ("found", "explained"),
    [
        ((WHERE, {"name": "PET_RDZV_CONF", "value": RDZV}, None), True),
        ((WHERE, {"name": "PET_RDZV_CONF", "value": "last_call_timeout=3"}, None), False),
        ((WHERE, {"name": "PET_RDZV_CONF", "value": RDZV + ",x=1"}, None), False),
        ((WHERE, {"name": "PET_RDZV_CONF", "value": RDZV}, {"name": "PET_RDZV_CONF"}), False),
        ((WHERE, None, {"name": "PET_RDZV_CONF", "value": RDZV}), False),  # the other direction
        ((WHERE.replace("worker-0", "worker-0.x"), {"value": RDZV}, None), False),
        # the workers' packing affinity, exactly, where upstream has none
        ((AFFINITY, PACKED, None), True),
        ((AFFINITY, PACKED, {}), False),
        ((AFFINITY, {"podAffinity": {PREFERRED: [{**TERM, "weight": 50}]}}, None), False),
        ((AFFINITY, {"podAffinity": {PREFERRED: [TERM, TERM]}}, None), False),
        (
            (
                AFFINITY,
                {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [TERM["podAffinityTerm"]]
                    }
                },
                None,
            ),
            False,
        ),
        ((AFFINITY, {**PACKED, "nodeAffinity": {}}, None), False),
        ((AFFINITY, packing_of("J_"), None), False),
        ((AFFINITY, packing_of("other"), None), False),  # packs with another job's workers
        ((AFFINITY.replace("worker-1", "master-0"), PACKED, None), False),
        # upstream's status-update Warning beside its restart one, only where a worker restarts
        (
            (
                "lifecycle worker failed, OnFailure / events: .Warning/PyTorchJobRestarting",
                ["job j is restarting because Worker replica(s) failed."],
                [
                    "PyTorchJob j is restarting because 1 Worker replica(s) failed.",
                    "job j is restarting because Worker replica(s) failed.",
                ],
            ),
            True,
        ),
        (
            (
                "lifecycle worker failed, Never / events: .Warning/PyTorchJobRestarting",
                None,
                ["PyTorchJob j is restarting because 1 Worker replica(s) failed."],
            ),
            False,
        ),
        (
            (
                "lifecycle worker failed, ExitCode permanent / events: .Warning/PyTorchJobRestarting",
                ["job j is restarting because Worker replica(s) failed."],
                None,
            ),
            False,
        ),
        # upstream's second create of an object it already made, never this operator's
        (
            (
                "lifecycle Master+Worker / events: .Warning/FailedCreateService",
                None,
                ['Error creating: services "l-mw-worker-0" already exists'],
            ),
            True,
        ),
        (
            (
                "lifecycle scale up and down through /scale / events: .Warning/FailedCreateService",
                None,
                ['Error creating: services "l-scale-worker-2" already exists'],
            ),
            True,
        ),
        (
            (
                "lifecycle Master+Worker / events: .Warning/FailedCreateService",
                ['Error creating: services "l-mw-worker-0" already exists'],
                None,
            ),
            False,
        ),
        (
            (
                "lifecycle Master+Worker / events: .Warning/FailedCreatePod",
                None,
                ['Error creating: pods "l-mw-worker-0" is forbidden: exceeded quota'],
            ),
            False,
        ),
    ],
)
def test_a_documented_difference_is_a_place_and_both_values(found: Any, explained: bool) -> None:
    assert (undocumented([found]) == []) is explained


def test_the_documented_differences_are_in_the_reference() -> None:
    text = " ".join((REPO_ROOT / "docs" / "pytorchjob.md").read_text().split())
    assert [k.words for k in DOCUMENTED if k.words not in text] == []


# A run of tests/integration/test_upstream_operator.py, recorded with
# AUTOSCALER_CONFORMANCE_RECORD=tests/fixtures/conformance/observed.json.
OBSERVED: dict[str, JSON] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "conformance" / "observed.json").read_text()
)
OBJECTS = [label for label in OBSERVED if label.startswith("objects ")]
LIFECYCLES = [label for label in OBSERVED if label.startswith("lifecycle ")]


def test_the_recorded_run_differs_only_as_documented() -> None:
    assert len(OBJECTS) == 6
    assert len(LIFECYCLES) == 12
    found = [d for case, o in OBSERVED.items() for d in observed_differences(case, o)]
    assert found != []
    assert undocumented(found) == []


@pytest.mark.parametrize("broken", BREAKAGES, ids=lambda b: b.__name__)
def test_a_broken_plan_shows_as_undocumented(broken: Any) -> None:
    caught = []
    for case in OBJECTS:
        observation = OBSERVED[case]
        ours = broken(observation["ours"])
        if ours != observation["ours"]:
            found = observed_differences(case, {**observation, "ours": ours})
            caught.append(undocumented(found) != [])
    assert caught != []
    assert all(caught)


def test_a_wrong_condition_reason_shows_as_undocumented() -> None:
    assert all(
        undocumented(observed_differences(case, wrong_condition_reason(OBSERVED[case]))) != []
        for case in LIFECYCLES
    )
