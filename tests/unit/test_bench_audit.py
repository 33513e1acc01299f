"""bench_operator's count of an operator's writes from the API server's audit log."""

import json
from pathlib import Path
from typing import Any

from benchmarks.audit import AuditLog, writes

JSON = dict[str, Any]


def entry(verb: str, resource: str, *, agent: str = "op/1", ns: str = "a", **extra: Any) -> JSON:
    return {
        "stage": "ResponseComplete",
        "verb": verb,
        "userAgent": agent,
        "objectRef": {"resource": resource, "namespace": ns, **extra},
    }


def test_writes_counts_one_clients_completed_writes_in_one_namespace() -> None:
    entries = [
        entry("create", "pods"),
        entry("create", "pods"),
        entry("update", "pytorchjobs", subresource="status"),
        entry("create", "pods", agent="user/1"),  # another client
        entry("create", "pods", ns="b"),  # another namespace
        entry("get", "pods"),  # not a write
        {**entry("create", "events"), "stage": "ResponseStarted"},  # counted at completion only
    ]
    assert writes(entries, agent="op/", namespace="a") == {
        ("create", "pods"): 2,
        ("update", "pytorchjobs/status"): 1,
    }


def test_the_log_is_read_as_it_grows_a_partial_line_waiting(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path, agent="op/", namespace="a")
    assert log.poll() == 0  # not written yet
    first, second = (json.dumps(entry("create", r)).encode() for r in ("pods", "services"))
    path.write_bytes(first + b"\n" + second[:10])
    assert log.poll() == 1
    with path.open("ab") as file:
        file.write(second[10:] + b"\n")
    assert log.poll() == 2
    assert log.counts == {("create", "pods"): 1, ("create", "services"): 1}
