"""`python -m tests.count`: how many tests the suite has, by what they run against.

Counted from pytest's own collection and the markers: `integration` (a real kube-apiserver,
etcd, scheduler, controller manager, Prometheus or Kueue, started by fixtures), `e2e` (real
training, torchrun and torchft, a subset of those); the rest are unit tests that touch no server."""

from __future__ import annotations

import contextlib
import io
import sys

import pytest


class Counter:
    def __init__(self) -> None:
        self.markers: list[set[str]] = []

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.markers = [{mark.name for mark in item.iter_markers()} for item in items]


def main() -> int:
    counter = Counter()
    collected = io.StringIO()
    with contextlib.redirect_stdout(collected):
        code = pytest.main(["--collect-only", "--quiet"], plugins=[counter])
    if code != 0:
        print(collected.getvalue(), file=sys.stderr)
        return int(code)
    servers = sum("integration" in marks for marks in counter.markers)
    training = sum("e2e" in marks for marks in counter.markers)
    unit = len(counter.markers) - servers
    print(
        f"tests: {len(counter.markers)}: {servers} against real servers "
        f"({training} of them real training), {unit} unit tests"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
