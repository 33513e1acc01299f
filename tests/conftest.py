from pathlib import Path

import pytest
from hypothesis import settings

_TESTS = Path(__file__).resolve().parent

pytest_plugins = ["tests.support.fixtures", "tests.support.recovery"]

# Every hypothesis test: no example database in the repository, no deadline on a shared 2-core
# machine (a slow example is not a failure), the same examples on every run.
settings.register_profile("project", database=None, deadline=None, derandomize=True)
settings.load_profile("project")

# The folder is the tier: a test under tests/integration needs real servers, one under tests/e2e
# also real training; everything else runs under `make test-unit`. No file marks its own tier.
_TIER_MARKS = {"integration": ("integration",), "e2e": ("integration", "e2e")}
# A server's HTTPS connection that a client's thread still held when its test ended is closed by
# the garbage collector, during whichever later test it runs in: that test is not at fault. Unit
# tests keep every warning an error.
_UNCLOSED_CONNECTION = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <ssl.SSLSocket:pytest.PytestUnraisableExceptionWarning"
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(_TESTS).parts
        for mark in _TIER_MARKS.get(parts[0], ()) if len(parts) > 1 else ():
            item.add_marker(mark)
        if len(parts) > 1 and parts[0] in _TIER_MARKS:
            item.add_marker(_UNCLOSED_CONNECTION)


# The suite's budget stays visible: each tier's minutes (set-up, call and tear-down of its tests)
# are printed at the end of every run, the slowest files and tests with them.
_FILE_SECONDS: dict[Path, float] = {}  # by path under tests/; a tier's time is its files'
_SLOWEST_FILES = 8


def _tier(path: Path) -> str:
    parts = path.relative_to(_TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in _TIER_MARKS else "unit"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = Path(str(report.fspath)).resolve()
    if path.is_relative_to(_TESTS):
        _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FILE_SECONDS:
        tiers: dict[str, float] = {}
        for path, seconds in _FILE_SECONDS.items():
            tiers[_tier(path)] = tiers.get(_tier(path), 0.0) + seconds
        spent = ", ".join(f"{tier} {s / 60:.1f} min" for tier, s in sorted(tiers.items()))
        terminalreporter.write_line(f"suite time by tier: {spent}")
        slowest = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:_SLOWEST_FILES]
        files = ", ".join(f"{path.relative_to(_TESTS)} {s / 60:.1f} min" for path, s in slowest)
        terminalreporter.write_line(f"slowest files: {files}")
