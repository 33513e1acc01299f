"""The fault matrix's figures: each case records how long the system took to recover, and the
run ends with a "fault matrix" section listing them (the README's reliability table is copied
from it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

# A test's lines travel on its report, so they reach the summary from pytest-xdist's workers too.
_PROPERTY = "fault matrix"
_LINES: list[str] = []


@dataclass(frozen=True)
class Recovery:
    case: str
    seconds: float
    outcome: str  # what "recovered" meant, e.g. "3 workers, no duplicate pod"

    @property
    def line(self) -> str:
        return f"{self.case}: recovered in {self.seconds:.1f} s ({self.outcome})"


Record = Callable[[str, float, str], None]


@pytest.fixture
def recovery(request: pytest.FixtureRequest) -> Record:
    """`recovery(case, seconds, outcome)` adds a line to the run's fault matrix section."""

    def record(case: str, seconds: float, outcome: str) -> None:
        request.node.user_properties.append((_PROPERTY, Recovery(case, seconds, outcome).line))

    return record


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """`with stopwatch() as elapsed:` ... `elapsed()` is the seconds since the block began."""
    start = time.monotonic()
    yield lambda: time.monotonic() - start


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":  # the last report of a test: it carries every line recorded
        _LINES.extend(line for name, line in report.user_properties if name == _PROPERTY)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LINES:
        terminalreporter.section("fault matrix")
        for line in _LINES:
            terminalreporter.write_line(line)
