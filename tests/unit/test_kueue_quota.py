"""A queued elastic job is offered only the counts its ClusterQueue's free quota admits now:
the free quota read from a ClusterQueue, the workers it holds, and the snapshot's bounds."""

import dataclasses
from typing import Any

import pytest

from autoscaler.clients.kueue_quota import free_quota, headroom
from autoscaler.engine.snapshot import reachable
from tests.support.memory_cluster import GPU, make_job

CPU = "cpu"


def cluster_queue(
    quotas: dict[str, dict[str, Any]], reserved: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """A ClusterQueue with one resource group; per flavour its nominal quotas and reservations."""
    return {
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": sorted({r for q in quotas.values() for r in q}),
                    "flavors": [
                        {"name": flavour, "resources": [
                            {"name": name, "nominalQuota": value} for name, value in q.items()
                        ]}
                        for flavour, q in quotas.items()
                    ],
                }
            ]
        },
        "status": {
            "flavorsReservation": [
                {"name": flavour, "resources": [
                    {"name": name, "total": value} for name, value in r.items()
                ]}
                for flavour, r in reserved.items()
            ]
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("quotas", "reserved", "expected"),
    [
        ({"a": {GPU: 4}}, {}, {GPU: 4.0}),  # nothing admitted yet: no status
        ({"a": {GPU: 4}}, {"a": {GPU: 3}}, {GPU: 1.0}),
        ({"a": {GPU: 4}}, {"a": {GPU: 6}}, {GPU: 0.0}),  # borrowed past nominal: none left
        ({"a": {GPU: 4}, "b": {GPU: 8}}, {"a": {GPU: 1}, "b": {GPU: 6}}, {GPU: 3.0}),  # one flavour
        ({"a": {GPU: "2", CPU: "8"}}, {"a": {CPU: "7500m"}}, {GPU: 2.0, CPU: 0.5}),
    ],
    ids=["unreserved", "partly", "over-nominal", "best-flavour", "quantities"],
)
def test_free_quota_is_nominal_less_reserved_in_the_best_flavour(
    quotas: dict[str, dict[str, Any]],
    reserved: dict[str, dict[str, Any]],
    expected: dict[str, float],
) -> None:
    assert free_quota(cluster_queue(quotas, reserved)) == expected


@pytest.mark.parametrize(
    ("free", "per_replica", "expected"),
    [
        ({GPU: 3.0}, {GPU: 1.0}, 3),
        ({GPU: 3.0}, {GPU: 2.0}, 1),
        ({GPU: 1.0}, {GPU: 2.0}, 0),
        ({GPU: 4.0, CPU: 1.0}, {GPU: 1.0, CPU: 0.5}, 2),  # the scarcest covered resource
        ({GPU: 4.0}, {CPU: 1.0}, None),  # the queue limits none of a worker's requests
        ({GPU: 4.0}, {GPU: 0.0, CPU: 1.0}, None),
        ({CPU: 0.3}, {CPU: 0.1}, 3),  # 0.3 / 0.1 is 2.9999999999999996 in floats
    ],
)
def test_headroom_is_the_workers_the_free_quota_holds(
    free: dict[str, float], per_replica: dict[str, float], expected: int | None
) -> None:
    assert headroom(free, per_replica) == expected


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, (8, None)),  # not under a queue
        ({"quota_headroom": 0}, (2, None)),  # full: only counts it can keep
        ({"quota_headroom": 3}, (5, None)),
        ({"quota_headroom": 10}, (8, None)),  # the job's own bound first
        ({"quota_headroom": 0, "replicas": 1, "min_replicas": 2}, (2, None)),  # never below min
        ({"quota_headroom": 1, "allowed_replicas": (1, 2, 4, 8)}, (3, (1, 2))),
        ({"quota_headroom": 0, "replicas": 1, "allowed_replicas": (2, 4)}, (8, (2, 4))),
    ],
    ids=["unqueued", "full", "room", "bounded", "min", "allowed", "allowed-out-of-reach"],
)
def test_the_snapshot_offers_the_counts_reachable_without_waiting(
    changes: dict[str, object], expected: tuple[int, tuple[int, ...] | None]
) -> None:
    assert reachable(dataclasses.replace(make_job("j"), **changes)) == expected  # type: ignore[arg-type]
