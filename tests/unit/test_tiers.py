"""The folder is a test's tier (tests/conftest.py): no test file marks its own."""

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TIER_MARK = re.compile(r"pytest\.mark\.(integration|e2e)\b")


def test_no_test_file_marks_its_own_tier() -> None:
    marked = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path.name != "conftest.py"
        and path != Path(__file__)
        and TIER_MARK.search(path.read_text())
    ]
    assert marked == []


def test_no_tier_imports_another_tiers_conftest() -> None:
    importing = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if re.search(r"^from tests\.\w+\.conftest import", path.read_text(), re.MULTILINE)
    ]
    assert importing == []
