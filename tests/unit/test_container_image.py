"""The Dockerfile against its build context: every file a COPY needs reaches the builder through
.dockerignore, and every pip install in it is locked (no Docker daemon is needed to know).

.dockerignore is read the way Docker's builder reads it (moby/patternmatcher, as documented in
Docker's "Build context" reference): patterns are cleaned paths relative to the context root,
`*`, `?` and `[...]` stay within one path segment, `**` spans any number, a pattern that matches a folder
matches everything under it, and the last matching pattern decides (`!` re-includes).
"""

import json
import re
import shlex
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from tests.support.image import IMAGE, script_command

ROOT = Path(__file__).resolve().parents[2]


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    pairs = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, arguments = stripped.partition(" ")
            pairs.append((keyword.upper(), arguments.strip()))
    return pairs


def copy_sources(dockerfile: str) -> list[str]:
    """What each COPY/ADD takes from the build context (not from an earlier stage)."""
    sources = []
    for keyword, arguments in instructions(dockerfile):
        if keyword not in {"COPY", "ADD"}:
            continue
        words = json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)
        flags = [word for word in words if word.startswith("--")]
        if any(flag.startswith("--from=") for flag in flags):
            continue
        paths = [word for word in words if not word.startswith("--")]
        sources += paths[:-1]  # the last is the destination
    return sources


def pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"(\*\*/?|\*|\?|\[[^\]]+\])", pattern):
        if token.startswith("**"):
            parts.append("(.*/)?" if token.endswith("/") else ".*")
        elif token == "*":
            parts.append("[^/]*")
        elif token == "?":
            parts.append("[^/]")
        elif token.startswith("["):
            parts.append(token)  # a character class, the same in both syntaxes
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts))


def ignore_rules(dockerignore: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(re-includes, pattern) in file order."""
    rules = []
    for line in dockerignore.splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        include = text.startswith("!")
        cleaned = str(PurePosixPath(text.removeprefix("!").strip().lstrip("/")))
        rules.append((include, pattern_regex(cleaned)))
    return rules


def sent_to_builder(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether `path` (relative to the context root) is in the build context."""
    parents = [str(parent) for parent in PurePosixPath(path).parents][:-1]  # not "."
    candidates = [path, *parents]
    sent = True
    for include, pattern in rules:
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            sent = include
    return sent


def tracked_under(source: str) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", source], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name]


DOCKERFILE = (ROOT / "Dockerfile").read_text()
RULES = ignore_rules((ROOT / ".dockerignore").read_text())


@pytest.mark.parametrize("source", copy_sources(DOCKERFILE))
def test_every_copy_source_reaches_the_builder(source: str) -> None:
    files = tracked_under(source)
    assert files, f"COPY {source}: nothing tracked there"
    assert [name for name in files if not sent_to_builder(name, RULES)] == [], (
        f"COPY {source}: .dockerignore keeps these out of the build context"
    )


def test_every_pip_install_in_the_image_is_locked() -> None:
    """Hash-checked from the lock, or the package alone built with the locked setuptools."""
    installs = [args for keyword, args in instructions(DOCKERFILE) if "pip install" in args]
    assert installs
    for command in installs:
        words = shlex.split(command)
        assert "--require-hashes" in words or {"--no-deps", "--no-build-isolation"} <= set(words)


@pytest.mark.parametrize(
    ("dockerignore", "path", "sent"),
    [
        ("*\n!pyproject.toml", "pyproject.toml", True),
        ("*\n!pyproject.toml", "requirements.lock", False),
        ("*\n!autoscaler/", "autoscaler/api/models.py", True),
        ("*\n!autoscaler/\n**/__pycache__", "autoscaler/api/__pycache__/m.pyc", False),
        ("*\n!autoscaler/\n**/*.py[cod]", "autoscaler/x.pyc", False),
        ("*\n!autoscaler/\n**/*.py[cod]", "autoscaler/x.py", True),
        ("docs", "docs/index.md", False),
        ("!docs\n*", "docs/index.md", False),  # the last match decides
        ("*.md", "docs/index.md", True),  # `*` stays within the root
        ("# a comment\n\n", "anything", True),
    ],
)
def test_the_dockerignore_reading(dockerignore: str, path: str, sent: bool) -> None:
    assert sent_to_builder(path, ignore_rules(dockerignore)) is sent


@pytest.mark.parametrize(
    ("dockerfile", "sources"),
    [
        ("COPY a b ./\n", ["a", "b"]),
        ("COPY --chown=1:1 a /x\n", ["a"]),
        ("COPY --from=build /install /usr/local\n", []),
        ('COPY ["a b", "/x/"]\n', ["a b"]),
        ("ADD a \\\n    b /x\n", ["a", "b"]),
        ("# COPY a /x\nRUN echo COPY\n", []),
    ],
)
def test_the_dockerfile_reading(dockerfile: str, sources: list[str]) -> None:
    assert copy_sources(dockerfile) == sources


def test_the_image_runs_the_operator_as_upstreams_manager() -> None:
    """Upstream's Deployment runs `/manager` with no arguments: the image makes that the
    operator, so the upstream manifests run it with only the image swapped."""
    assert script_command("/manager") == ["autoscaler", "operator"]
    assert f"docker build -t {IMAGE} ." in (ROOT / "Dockerfile").read_text()
    with pytest.raises(LookupError, match="writes no /elsewhere"):
        script_command("/elsewhere")
