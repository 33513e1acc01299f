"""What `kustomize build` makes of a plain kustomization: its resources, in order, with the
kustomization's `namespace` set on the namespaced objects. Plain YAML reading, no binary.

Only the fields this project's base uses are understood (`namespace`, `resources`); any other
field is an error, so a transformer added to deploy/kustomization.yaml cannot be silently
ignored by the tests that read it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]
KUSTOMIZATION = "kustomization.yaml"
UNDERSTOOD = frozenset({"apiVersion", "kind", "namespace", "resources"})
# Kinds without a namespace: kustomize's own list, cut to the API groups this project uses.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "StorageClass",
        "PriorityClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "APIService",
    }
)


class KustomizeError(Exception):
    """The kustomization uses something this reader does not understand, or is broken."""


@dataclass(frozen=True)
class Resource:
    """One object of the build, and the file (relative to the kustomization) it came from."""

    source: str
    obj: JSON

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        namespace = self.obj["metadata"].get("namespace")
        return str(namespace) if namespace is not None else None

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name} ({self.source})"


@dataclass(frozen=True)
class Build:
    directory: Path
    namespace: str | None
    files: tuple[Path, ...]  # every file the build read, kustomization files included
    resources: tuple[Resource, ...]

    def one(self, kind: str, name: str) -> JSON:
        found = [r.obj for r in self.resources if r.kind == kind and r.name == name]
        if len(found) != 1:
            raise KeyError(f"{len(found)} objects {kind} {name} in {self.directory}")
        return found[0]

    def of_kind(self, kind: str) -> list[JSON]:
        return [r.obj for r in self.resources if r.kind == kind]


def build(directory: Path) -> Build:
    """The objects `kustomize build DIRECTORY` would print (for the fields understood here)."""
    directory = directory.resolve()
    path = directory / KUSTOMIZATION
    if not path.is_file():
        raise KustomizeError(f"{directory} has no {KUSTOMIZATION}")
    spec = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(spec) - UNDERSTOOD)
    if unknown:
        raise KustomizeError(f"{path}: fields not understood here: {', '.join(unknown)}")
    if spec.get("kind", "Kustomization") != "Kustomization":
        raise KustomizeError(f"{path}: kind {spec.get('kind')!r} is not Kustomization")
    namespace = spec.get("namespace")
    files: list[Path] = [path]
    resources: list[Resource] = []
    for entry in spec.get("resources") or []:
        target = (directory / entry).resolve()
        if not target.is_relative_to(directory):
            raise KustomizeError(f"{path}: {entry} is outside {directory}")
        if target.is_dir():
            nested = build(target)
            files.extend(nested.files)
            found = [Resource(f"{entry.rstrip('/')}/{r.source}", r.obj) for r in nested.resources]
        elif target.is_file():
            files.append(target)
            found = [Resource(entry, obj) for obj in _documents(target)]
        else:
            raise KustomizeError(f"{path}: resource {entry} does not exist")
        resources.extend(_with_namespace(r, namespace) for r in found)
    _check_unique(resources)
    return Build(directory, namespace, tuple(files), tuple(resources))


def unreferenced(built: Build, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """Files under the kustomization's directory that no resource list reaches."""
    read = set(built.files)
    return sorted(
        str(path.relative_to(built.directory))
        for path in built.directory.rglob("*")
        if path.is_file()
        and path not in read
        and not any(path.relative_to(built.directory).is_relative_to(i) for i in ignore)
    )


def _documents(path: Path) -> list[JSON]:
    objects = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for obj in objects:
        if not isinstance(obj, dict) or not {"apiVersion", "kind", "metadata"} <= set(obj):
            raise KustomizeError(f"{path}: a document is not a Kubernetes object")
        if obj.get("kind", "").endswith("List"):
            raise KustomizeError(f"{path}: List objects are not understood here")
    return objects


def _with_namespace(resource: Resource, namespace: str | None) -> Resource:
    """kustomize's namespace transformer: namespaced objects move to `namespace`."""
    if namespace is None or resource.kind in CLUSTER_SCOPED:
        return resource
    obj = copy.deepcopy(resource.obj)
    obj["metadata"]["namespace"] = namespace
    return Resource(resource.source, obj)


def _check_unique(resources: list[Resource]) -> None:
    seen: dict[tuple[str, str, str | None, str], str] = {}
    for r in resources:
        group = str(r.obj["apiVersion"]).rpartition("/")[0]
        key = (group, r.kind, r.namespace, r.name)
        if key in seen:
            raise KustomizeError(f"{r} is also in {seen[key]}")
        seen[key] = r.source
