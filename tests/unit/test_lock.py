"""The locks against pyproject.toml (`make lock`): requirements.lock, what the image installs,
pins the runtime dependencies and the build backend; requirements-dev.lock, what `make test` and
CI install, pins the same at the same versions plus every extra; requirements-demo.lock, what
`make demo` installs, the image's plus the simulator's extra, at the dev lock's versions. Each declared dependency pinned at a version its
specifier allows, with hashes, and everything each one needs (on this platform) pinned too."""

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
IMAGE, DEV, DEMO = "requirements.lock", "requirements-dev.lock", "requirements-demo.lock"
EXTRAS = {IMAGE: (), DEV: ("sim", "test", "dev"), DEMO: ("sim",)}
TRAINING_EXTRAS = ("torchft",)  # training images' (they pull torch): pinned by testenv/torch.sh


def declared(lock: str) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(EXTRAS[DEV]) == set(extras) - set(TRAINING_EXTRAS)  # the others: the dev lock
    texts = [*project["dependencies"], *(text for extra in EXTRAS[lock] for text in extras[extra])]
    return [Requirement(text) for text in texts]


def locked(lock: str) -> dict[str, Version]:
    pins = {}
    for line in (REPO / lock).read_text().splitlines():
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


CASES = [(lock, requirement) for lock in (IMAGE, DEV, DEMO) for requirement in declared(lock)]
IDS = [f"{lock}:{requirement}" for lock, requirement in CASES]


@pytest.mark.parametrize(("lock", "requirement"), CASES, ids=IDS)
def test_every_dependency_is_pinned_within_its_specifier(
    lock: str, requirement: Requirement
) -> None:
    pins = locked(lock)
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{name} is not in {lock}: run `make lock`"
    assert requirement.specifier.contains(pins[name]), (
        f"{name}=={pins[name]} is outside {requirement.specifier}: run `make lock`"
    )


@pytest.mark.parametrize(("lock", "requirement"), CASES, ids=IDS)
def test_what_each_dependency_needs_is_pinned_too(lock: str, requirement: Requirement) -> None:
    missing = needed_by(requirement) - set(locked(lock))
    assert not missing, f"not in {lock}: {sorted(missing)}: run `make lock`"


@pytest.mark.parametrize("lock", [IMAGE, DEMO])
def test_the_tests_run_the_versions_the_image_and_the_demo_ship(lock: str) -> None:
    shipped, dev = locked(lock), locked(DEV)
    differ = {name: (v, dev.get(name)) for name, v in shipped.items() if dev.get(name) != v}
    assert not differ, f"{lock} vs dev lock: {differ}: run `make lock`"


def test_the_demo_installs_no_development_tool() -> None:
    demo = locked(DEMO)
    assert "matplotlib" in demo
    assert not {"pytest", "ruff", "mypy", "mkdocs", "ipykernel", "hypothesis"} & set(demo)
    assert set(locked(IMAGE)) <= set(demo)


@pytest.mark.parametrize(
    "requirement",
    [
        Requirement(text)
        for text in tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    ],
    ids=str,
)
def test_the_image_and_the_demo_build_the_package_with_a_locked_backend(
    requirement: Requirement,
) -> None:
    """The Dockerfile and `make demo` build the package without build isolation, so with these
    pins."""
    for lock in (IMAGE, DEMO):
        pins = locked(lock)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in {lock}: run `make lock`"
        assert requirement.specifier.contains(pins[name])


def test_nothing_of_the_extras_is_locked_for_the_image() -> None:
    assert "matplotlib" not in locked(IMAGE)


@pytest.mark.parametrize("lock", [IMAGE, DEV, DEMO])
def test_every_pin_carries_hashes(lock: str) -> None:
    text = (REPO / lock).read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text)
    pinned = [entry for entry in entries if PIN.match(entry)]
    assert len(pinned) == len(locked(lock))
    assert all("--hash=sha256:" in entry for entry in pinned)


def test_the_training_environment_pins_the_torchft_extra() -> None:
    """What testenv/torch.sh installs for the torchft scenarios is what the extra asks for."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (wanted,) = project["optional-dependencies"]["torchft"]
    script = (REPO / "testenv" / "torch.sh").read_text()
    assert re.search(rf"\b{re.escape(wanted)}\b", script), wanted
