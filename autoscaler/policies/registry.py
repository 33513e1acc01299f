"""Finding policies: the entry-point group `autoscaler.policies`, or a Python file's `PLUGIN`.

Built-ins are registered in the package's own entry points, so they load through the same door
as a third-party plug-in.
"""

import importlib.util
import sys
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autoscaler.api.errors import first_error
from autoscaler.policies.contract import Policy, PolicyPlugin, reporting_of

GROUP = "autoscaler.policies"
DEFAULT_POLICY = "global-optimizer"


class PolicyError(Exception):
    """A policy that cannot be found, loaded or configured; the message says which and why."""


def installed() -> dict[str, EntryPoint]:
    """Every installed plug-in by name, not yet loaded (a fresh lookup each call)."""
    return {entry.name: entry for entry in entry_points(group=GROUP)}


def load_entry(entry: EntryPoint) -> PolicyPlugin[Any]:
    """One installed plug-in; a broken package fails alone, with its name in the message."""
    try:
        plugin = entry.load()
    except Exception as error:  # third-party code: anything may go wrong in it
        raise PolicyError(
            f"policy {entry.name!r} ({entry.value}) fails to load: {error!r}"
        ) from error
    return _checked(plugin, origin=f"entry point {entry.value}")


def load_file(path: Path) -> PolicyPlugin[Any]:
    """The `PLUGIN` of a Python file, e.g. one mounted from a ConfigMap."""
    if not path.is_file():
        raise PolicyError(f"policy file {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"autoscaler_policy_file_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise PolicyError(f"policy file {path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise PolicyError(f"policy file {path} fails to load: {error!r}") from error
    return _checked(getattr(module, "PLUGIN", None), origin=str(path))


def find(reference: str) -> PolicyPlugin[Any]:
    """A plug-in by name, or by file path when the reference ends in `.py`."""
    if reference.endswith(".py"):
        return load_file(Path(reference))
    entries = installed()
    if reference not in entries:
        known = ", ".join(sorted(entries)) or "none"
        raise PolicyError(f"unknown policy {reference!r}; installed: {known}")
    return load_entry(entries[reference])


def build(
    plugin: PolicyPlugin[Any], config: Mapping[str, Any] | None = None, *, label: str = ""
) -> Policy:
    """The plug-in's policy from a config mapping, validated by the plug-in's model, with its
    `reporting` checked. The one way every command builds a policy, so that a bad config reads
    the same everywhere: `policy 'NAME': field: message` (`label` names it instead of the
    plug-in's name, e.g. a simulator line-up entry)."""
    name = label or plugin.name
    try:
        parsed = plugin.config_model.model_validate(dict(config or {}))
    except ValidationError as error:
        raise PolicyError(f"policy {name!r}: {first_error(error)}") from error
    policy = plugin.build(parsed)
    try:
        reporting_of(policy)
    except TypeError as error:
        raise PolicyError(f"policy {name!r}: {error}") from error
    return policy


def _checked(plugin: object, *, origin: str) -> PolicyPlugin[Any]:
    if not isinstance(plugin, PolicyPlugin):
        raise PolicyError(f"{origin} does not export a PolicyPlugin (got {type(plugin).__name__})")
    return plugin
