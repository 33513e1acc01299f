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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(_TESTS).parts
        for mark in _TIER_MARKS.get(parts[0], ()) if len(parts) > 1 else ():
            item.add_marker(mark)
