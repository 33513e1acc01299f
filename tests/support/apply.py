"""Sending arbitrary manifests to the API server, as `kubectl` does: a REST mapping from
discovery, server-side dry-run creates, server-side apply, deletes. Strict field validation
throughout, so an unknown or misspelt field is an error, not a silently dropped value."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from autoscaler.clients.kube import ConflictError, Kube, NotFoundError, Resource

JSON = dict[str, Any]
FIELD_MANAGER = "autoscaler-tests"


class RestMapper:
    """Kind -> resource and scope, from the server's discovery (re-read on a miss, so kinds of
    CRDs created meanwhile are found)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._known: dict[str, dict[str, tuple[str, bool]]] = {}

    def resource(self, obj: JSON) -> tuple[Resource, bool]:
        """The resource of `obj`'s kind, and whether it is namespaced."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        kinds = self._known.get(api_version)
        if kinds is None or kind not in kinds:
            kinds = self._known[api_version] = self._discover(api_version)
        if kind not in kinds:
            raise LookupError(f"the server does not serve {kind} in {api_version}")
        plural, namespaced = kinds[kind]
        group, _, version = api_version.rpartition("/")
        return Resource(group, version, plural), namespaced

    def namespaced(self, obj: JSON) -> bool:
        return self.resource(obj)[1]

    def _discover(self, api_version: str) -> dict[str, tuple[str, bool]]:
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            listing = self.kube.request("GET", path)
        except NotFoundError:
            return {}
        return {
            r["kind"]: (r["name"], bool(r["namespaced"]))
            for r in listing.get("resources") or []
            if "/" not in r["name"]
        }


def _path(mapper: RestMapper, obj: JSON, *, named: bool) -> str:
    resource, namespaced = mapper.resource(obj)
    namespace = obj["metadata"].get("namespace") if namespaced else None
    if namespaced and not namespace:
        raise ValueError(f"{obj['kind']} {obj['metadata']['name']} has no namespace")
    return resource.path(namespace, obj["metadata"]["name"] if named else None)


def dry_run_create(mapper: RestMapper, obj: JSON) -> JSON:
    """What creating `obj` would store (admission, defaulting, schema and CEL validation ran).

    An object that already exists (e.g. the CRD another fixture created) is checked as a dry-run
    replace of the existing one instead, which runs the same validation.
    """
    strict = [("dryRun", "All"), ("fieldValidation", "Strict")]
    try:
        return mapper.kube.request("POST", _path(mapper, obj, named=False), body=obj, query=strict)
    except ConflictError:
        pass
    path = _path(mapper, obj, named=True)
    existing = mapper.kube.request("GET", path)
    metadata = {**obj["metadata"], "resourceVersion": existing["metadata"]["resourceVersion"]}
    return mapper.kube.request("PUT", path, body={**obj, "metadata": metadata}, query=strict)


def exists(mapper: RestMapper, obj: JSON) -> bool:
    try:
        mapper.kube.request("GET", _path(mapper, obj, named=True))
    except NotFoundError:
        return False
    return True


def apply(mapper: RestMapper, obj: JSON, *, manager: str = FIELD_MANAGER) -> JSON:
    """Server-side apply (`kubectl apply --server-side --force-conflicts`)."""
    query = [("fieldManager", manager), ("force", "true"), ("fieldValidation", "Strict")]
    return mapper.kube.request(
        "PATCH",
        _path(mapper, obj, named=True),
        body=obj,
        query=query,
        content_type="application/apply-patch+yaml",
    )


def delete(mapper: RestMapper, obj: JSON) -> None:
    with suppress(NotFoundError):
        mapper.kube.request("DELETE", _path(mapper, obj, named=True))
