"""requirements.lock (what the image installs, `make lock`) against pyproject.toml's runtime
dependencies: each one pinned, at a version its specifier allows, with hashes, and everything
each one needs (on this platform) pinned too."""

import re
import tomllib
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def runtime_dependencies() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def locked() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def needed_by(requirement: Requirement) -> set[str]:
    """The distribution and everything it needs here, as installed (extras not followed)."""
    seen: set[str] = set()
    pending = [requirement]
    while pending:
        current = pending.pop()
        name = canonicalize_name(current.name)
        if name in seen or (current.marker is not None and not current.marker.evaluate()):
            continue
        seen.add(name)
        for text in requires(current.name) or []:
            child = Requirement(text)
            if child.marker is None or child.marker.evaluate({"extra": ""}):
                pending.append(child)
    return seen


@pytest.mark.parametrize("requirement", runtime_dependencies(), ids=str)
def test_every_runtime_dependency_is_pinned_within_its_specifier(requirement: Requirement) -> None:
    pins = locked()
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{name} is not in requirements.lock: run `make lock`"
    assert requirement.specifier.contains(pins[name]), (
        f"{name}=={pins[name]} is outside {requirement.specifier}: run `make lock`"
    )


@pytest.mark.parametrize("requirement", runtime_dependencies(), ids=str)
def test_what_each_runtime_dependency_needs_is_pinned_too(requirement: Requirement) -> None:
    missing = needed_by(requirement) - set(locked())
    assert not missing, f"not in requirements.lock: {sorted(missing)}: run `make lock`"


def test_nothing_of_the_extras_is_locked_for_the_image() -> None:
    assert "matplotlib" not in locked()


def test_every_pin_carries_hashes() -> None:
    text = (REPO / "requirements.lock").read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n", 1)[-1])
    pinned = [entry for entry in entries if PIN.match(entry)]
    assert len(pinned) == len(locked())
    assert all("--hash=sha256:" in entry for entry in pinned)
