"""Adopting a job's orphaned pods and services and releasing its own whose labels no longer
match (upstream's `ClaimPods` and `ClaimServices`), written through the API server."""

import logging
from collections.abc import Mapping
from typing import Any

from autoscaler.clients.informer import Informer
from autoscaler.clients.kube import BY_KIND, JOBS, Kube, NotFoundError
from autoscaler.controller.claims import adoption_patch, claims, release_patch
from autoscaler.controller.naming import controller_reference

JSON = dict[str, Any]
log = logging.getLogger(__name__)
INVALID = 422  # the API server's status for a write it finds invalid
CLAIMED_KINDS = ("Pod", "Service")


class AdoptionError(Exception):
    """The job cannot adopt now (upstream's `CanAdopt`): the pass is retried."""


class Adoption:
    """Claims a job's pods and services; `caches` are the runner's, written through."""

    def __init__(self, kube: Kube, caches: Mapping[str, Informer]) -> None:
        self.kube, self.caches = kube, caches

    def claim(self, job: JSON) -> None:
        """Adopt the job's orphans and release its own whose labels no longer match; before the
        first adoption, a fresh read checks that the job is still there and not being deleted."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        uid = job["metadata"].get("uid", "")
        decided = {
            kind: claims(
                [*cache.indexed((namespace, name)), *cache.indexed(("owner", uid))], job=job
            )
            for kind, cache in ((kind, self.caches[kind]) for kind in CLAIMED_KINDS)
        }
        if any(d["adopt"] for d in decided.values()):
            self._can_adopt(job)
        owner = controller_reference(name=name, uid=uid)
        failures = []
        for kind, decision in decided.items():
            patches = [(obj, adoption_patch(obj, owner), False) for obj in decision["adopt"]]
            patches += [(obj, release_patch(obj, uid), True) for obj in decision["release"]]
            for obj, patch, release in patches:
                if error := self._patch_owner(kind, obj, patch, release=release):
                    failures.append(error)
        if failures:
            raise failures[0]

    def _can_adopt(self, job: JSON) -> None:
        """Upstream's `RecheckDeletionTimestamp`, from an uncached read."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        try:
            fresh = self.kube.get(JOBS, namespace, name)
        except NotFoundError:
            raise AdoptionError(f"{namespace}/{name} is gone") from None
        if fresh["metadata"].get("uid") != job["metadata"].get("uid"):
            raise AdoptionError(f"original job {namespace}/{name} is gone: another uid now")
        if fresh["metadata"].get("deletionTimestamp"):
            raise AdoptionError(f"{namespace}/{name} has just been deleted")

    def _patch_owner(self, kind: str, obj: JSON, patch: JSON, *, release: bool) -> Exception | None:
        """One adoption or release; an object gone meanwhile is no failure, nor (as upstream's
        `ReleasePod`) a release the API server finds invalid (no such reference any more)."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            patched = self.kube.merge_patch(BY_KIND[kind], namespace, name, patch, strategic=True)
        except NotFoundError:
            return None
        except Exception as error:
            if release and getattr(error, "status", None) == INVALID:
                return None
            return error
        log.info("%s %s/%s %s", kind, namespace, name, "released" if release else "adopted")
        self.caches[kind].apply("MODIFIED", patched)
        return None
