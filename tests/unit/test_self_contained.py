"""The repository stands alone: nothing in it points where a maintainer cannot follow.

A maintainer has the repository and the upstream projects it names, nothing else: no path outside
the repository, no section of a document it does not contain, no work item of the tracker it was
built from, and no Markdown document it does not ship. Facts are stated in the project's own docs
with the upstream source they come from (a file, a paper, a version).
"""

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Text the project wrote; licences and upstream's own data (descriptions of the Kubernetes types,
# traces) are copied unchanged and say what their authors wrote.
TEXT = re.compile(r"(\.(py|md|ya?ml|toml|sh|ipynb|cfg|ini|txt|json)|Makefile|Dockerfile|/run)$")
COPIED = re.compile(r"(^|/)(LICENSE[^/]*|k8s-types\.json|snapshot\.schema\.json)$|/data/")

FORBIDDEN = {
    "a path outside the repository": re.compile(r"(?<![\w.~])/(work|home|Users)/\w"),
    "a sibling folder outside the repository": re.compile(r"\.\./shared\b"),
    "a numbered section of a document": re.compile(r"§\s*\d"),
    "a work item": re.compile(
        r"\b(the|this|that|an?|per|see) issue('s)?\b|\bissue\s*#?\d+|\bround (one|two)\b", re.I
    ),
}
MARKDOWN_NAME = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")


@cache
def tracked_text_files() -> tuple[Path, ...]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout.split("\0")
    return tuple(
        ROOT / name
        for name in listed
        if name
        and TEXT.search(name)
        and not COPIED.search(name)
        and (ROOT / name).is_file()
        and ROOT / name != Path(__file__).resolve()  # its examples break the rules on purpose
    )


def offending_lines(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in tracked_text_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    return found


def test_the_scan_sees_the_repository() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in tracked_text_files()}
    assert {"README.md", "Makefile", "autoscaler/controller/reconcile.py"} <= names


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_nothing_points_outside_the_repository(what: str) -> None:
    assert offending_lines(FORBIDDEN[what]) == [], f"{what}, which a maintainer cannot follow"


def test_every_markdown_document_named_is_in_the_repository() -> None:
    shipped = {path.name for path in ROOT.rglob("*.md") if ".venv" not in path.parts}
    missing = [
        f"{line} (names {name})"
        for line in offending_lines(MARKDOWN_NAME)
        for name in MARKDOWN_NAME.findall(line.split(": ", 1)[1])
        if name not in shipped
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("see /" + "work/shared/reference/x for why", "a path outside the repository"),
        ("from ../" + "shared/data", "a sibling folder outside the repository"),
        ("as upstream does (reference \u00a7" + "10.3)", "a numbered section of a document"),
        ("the size the issue asks for", "a work item"),
        ("fixed in iss" + "ue 5", "a work item"),
        ("the first round's tests", None),
        ("torch GitHub issues #135712 and #123678 show it", None),
        ("cached in ~/.cache/elastic-autoscaler/x", None),
        ("the engine issues one LIST", None),
    ],
)
def test_the_rules_catch_what_they_name(line: str, what: str | None) -> None:
    caught = [name for name, pattern in FORBIDDEN.items() if pattern.search(line)]
    assert caught == ([what] if what else [])


def test_the_readme_links_resolve() -> None:
    """The README is read on the repository's front page, outside the docs site's strict build."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert targets, "the README links to its documentation"
    assert [t for t in targets if "://" not in t and not (ROOT / t).exists()] == []
