"""The repository stands alone: nothing in it points where a maintainer cannot follow.

A maintainer has the repository and the upstream projects it names, nothing else: no path outside
the repository, no section of a document it does not contain, no work item of the tracker it was
built from, and no Markdown document it does not ship. Facts are stated in the project's own docs
with the upstream source they come from (a file, a paper, a version).

Absolute paths: system paths every machine or container has (/etc, /usr, /var/run) and paths
inside the project's own images and pods (/workspace, /opt/pytorch-mnist, /etc/autoscaler) are
fine. Forbidden are the places where files exist only on the machine they were written on: home
folders (/home, /Users, /root), a build machine's work area (/work), and files under /tmp or a
macOS temporary folder. /tmp itself is on every machine, but a file named there is not: code and
tests use `tmp_path` or `tempfile`, and examples stage files elsewhere (a bare /tmp, such as a
pod's scratch mount, is fine).

Work items: the word issue or item followed by a number, a number after "#", or a ticket of the
tracker the project was built in. An upstream bug is named with its repository
(owner/name#1234), which a maintainer can follow; Markdown headings and anchors (`# Title`, `(#1-the-contract)`), HTML entities and colours
(`"#808080"`, `color: #123456`) are not work items.
"""

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Text the project wrote; licences, notices and upstream's own data (descriptions of the Kubernetes
# types, upstream CRDs, traces and profiles) are copied unchanged and say what their authors
# wrote. The READMEs beside that data are the project's own, so they are scanned.
TEXT = re.compile(r"(\.(py|md|ya?ml|toml|sh|ipynb|cfg|ini|txt|json)|Makefile|Dockerfile|/run)$")
COPIED = re.compile(
    r"(^|/)(LICENSE[^/]*|NOTICE[^/]*|k8s-types\.json|snapshot\.schema\.json)$"
    r"|/data/.*\.(csv|ya?ml|json)$"
    r"|^tests/fixtures/upstream/training-operator-v[\d.]+/"  # a release's files, unchanged
)

TEMPORARY_FILE = r"tmp/\w|private/(tmp|var)/|var/folders/"
# A bare "#14": not qualified by a repository (owner/name#14), not an anchor ("](#5)",
# "#1-the-contract"), an HTML entity ("&#123;") or a colour ('"#808080"', "color: #123456").
BARE_NUMBER = r"""(?<![\w/&#"'\]-])(?<!\]\()(?<!:)(?<!: )#\d+(?![-\w])"""
FORBIDDEN = {
    "a path outside the repository": re.compile(
        rf"(?<![\w.~])/((work|home|Users|root)/[\w.]|{TEMPORARY_FILE})"
    ),
    "a sibling folder outside the repository": re.compile(r"\.\./shared\b"),
    "a numbered section of a document": re.compile(r"§\s*\d"),
    "a work item": re.compile(
        r"\b(the|this|that|an?|per|see) issue('s)?\b|\b(issue|item)\s*#?\d+|\btickets?\b"
        rf"|\bround (one|two)\b|{BARE_NUMBER}",
        re.I,
    ),
}
README_LIMIT = 8 * 1024  # a front door: what it is, how to start, where the docs are
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
    # The project's own READMEs beside copied data; not the data itself.
    assert {"autoscaler/sim/data/README.md", "tests/data/kueue/README.md"} <= names
    assert not any(name.endswith((".csv", "LICENSE")) for name in names)
    assert "tests/data/kueue/kueue.x-k8s.io_workloads.yaml" not in names


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
        ("see /" + "root/.cache/x", "a path outside the repository"),
        ("the evidence in /" + "tmp/audit/evidence.txt", "a path outside the repository"),
        ("written to /" + "var/folders/x/T/run.log", "a path outside the repository"),
        ("the size the issue asks for", "a work item"),
        ("fixed in iss" + "ue 5", "a work item"),
        ("as it" + "em 5 asks", "a work item"),
        ("see #" + "14", "a work item"),
        ("the runner times out (#" + "14)", "a work item"),
        ("#" + "14: the runner times out", "a work item"),
        ("the tic" + "ket asks for it", "a work item"),
        ("torch GitHub issues #" + "135712 show it", "a work item"),  # whose tracker?
        ("the first round's tests", None),
        ("GitHub issues pytorch/pytorch#135712 and pytorch/pytorch#123678 show it", None),
        ("upstream v1.6+, kubeflow/training-operator#1724", None),
        ("cached in ~/.cache/elastic-autoscaler/x", None),
        ("the engine issues one LIST", None),
        ("## 5. What the engine does around a policy", None),
        ("# 14 jobs on 8 nodes", None),
        ("see [the contract](#1-the-contract)", None),
        ("see [step five](#5)", None),
        ('"color": "#' + '808080"', None),
        ("color: #" + "123456;", None),
        ("&#" + "123;", None),
        ("step 5 of the walk, items[0]", None),
        ("the pod's scratch volume at /tmp", None),
        ("cwd=tmp_path / 'tmp' / 'x'", None),
        ("mountPath: /etc/autoscaler; torchrun /workspace/train.py", None),
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


def test_every_readme_is_a_front_door() -> None:
    """A README says what is here and where to read on; the docs site holds the rest."""
    readmes = [path for path in tracked_text_files() if path.name == "README.md"]
    assert ROOT / "README.md" in readmes
    too_long = {
        path.relative_to(ROOT).as_posix(): size
        for path in readmes
        if (size := len(path.read_bytes())) > README_LIMIT
    }
    assert too_long == {}, f"over {README_LIMIT} bytes: move the detail into docs/"
