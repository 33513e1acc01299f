"""What a job's own creates and deletes must show in the caches before it is planned again.

client-go's controller expectations: a pass that writes pods or services waits for the watch to
show them (or for EXPECTATION_TIMEOUT), so the next pass does not act on a stale cache.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoscaler.controller.keys import JobKey
from autoscaler.controller.reconcile_pass import Plan

JSON = dict[str, Any]
ObjectRef = tuple[str, str]  # (kind, name)
# Reads the cache of a kind: (kind, (namespace, name)) -> the cached object or None.
CacheLookup = Callable[[str, JobKey], JSON | None]
EXPECTATION_TIMEOUT = 30.0  # after this, stop waiting for the watch to show our own writes
EXPECTED_KINDS = ("Pod", "Service")


@dataclass
class _Expectation:
    """Writes the caches must show before the job is planned again (client-go expectations)."""

    created: set[ObjectRef] = field(default_factory=set)
    deleted: set[ObjectRef] = field(default_factory=set)
    deadline: float = 0.0


class Expectations:
    """Every job's pending expectations, shared by the workers."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self.monotonic = monotonic
        self._expectations: dict[JobKey, _Expectation] = {}
        self._lock = threading.Lock()

    def expect(self, key: JobKey, result: Plan) -> None:
        """Wait for the plan's pod and service creates and deletes to show."""
        created = {
            (obj["kind"], obj["metadata"]["name"])
            for obj in result.create
            if obj["kind"] in EXPECTED_KINDS
        }
        deleted = {(kind, name) for kind, name in result.delete if kind in EXPECTED_KINDS}
        if created or deleted:
            with self._lock:
                self._expectations[key] = _Expectation(
                    created, deleted, self.monotonic() + EXPECTATION_TIMEOUT
                )

    def never_coming(self, key: JobKey, ref: ObjectRef) -> None:
        """A create or delete that failed never shows in the caches: stop waiting for it (as
        client-go lowers its expectations), so the retry plans at once instead of waiting out
        EXPECTATION_TIMEOUT (a scale-up cut by a kube-apiserver crash, in the fault matrix)."""
        with self._lock:
            expectation = self._expectations.get(key)
            if expectation is not None:
                expectation.created.discard(ref)
                expectation.deleted.discard(ref)

    def forget(self, key: JobKey) -> None:
        with self._lock:
            self._expectations.pop(key, None)

    def met(self, key: JobKey, cached: CacheLookup) -> bool:
        """True once the caches show every expected write, or the expectation timed out."""
        with self._lock:
            expectation = self._expectations.get(key)
        if expectation is None:
            return True
        found = {
            (kind, name): cached(kind, (key[0], name))
            for kind, name in expectation.created | expectation.deleted
        }
        seen = all(found[ref] is not None for ref in expectation.created)
        gone = all(_gone(found[ref]) for ref in expectation.deleted)
        if (seen and gone) or self.monotonic() > expectation.deadline:
            self.forget(key)
            return True
        return False


def _gone(obj: JSON | None) -> bool:
    return obj is None or bool(obj["metadata"].get("deletionTimestamp"))
