"""The informer's cache: indexes follow updates, a late watch event never rolls it back, and an
expired watch (410 Gone) lists again."""

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.clients.informer import Informer
from autoscaler.clients.kube import PODS, ExpiredError

JSON = dict[str, Any]


def pod(name: str, *, version: str, job: str = "j", managed: bool = False) -> JSON:
    metadata: JSON = {
        "name": name,
        "namespace": "ns",
        "resourceVersion": version,
        "labels": {"job": job},
    }
    if managed:
        metadata["managedFields"] = [{"manager": "kubectl"}]
    return {"metadata": metadata}


def informer(seen: list[tuple[str, str]]) -> Informer:
    def on_event(kind: str, obj: JSON) -> None:
        seen.append((kind, obj["metadata"]["resourceVersion"]))

    return Informer(
        None, PODS, on_event=on_event, index=lambda obj: obj["metadata"]["labels"]["job"]
    )  # type: ignore[arg-type]


def test_index_follows_moves_and_deletes() -> None:
    cache = informer([])
    cache.apply("ADDED", pod("p", version="1", job="a"))
    cache.apply("MODIFIED", pod("p", version="2", job="b"))
    assert ([p["metadata"]["name"] for p in cache.indexed("a")], len(cache.indexed("b"))) == ([], 1)
    cache.apply("DELETED", pod("p", version="3", job="b"))
    assert (cache.indexed("b"), cache.get(("ns", "p"))) == ([], None)


def test_an_event_older_than_a_written_through_object_is_ignored() -> None:
    seen: list[tuple[str, str]] = []
    cache = informer(seen)
    cache.apply("MODIFIED", pod("p", version="10"))  # our own write, cached at once
    cache.apply("MODIFIED", pod("p", version="9"))  # the watch catching up
    assert cache.get(("ns", "p"))["metadata"]["resourceVersion"] == "10"  # type: ignore[index]
    assert seen == [("MODIFIED", "10")]


def test_managed_fields_are_not_kept() -> None:
    cache = informer([])
    cache.apply("ADDED", pod("p", version="1", managed=True))
    assert "managedFields" not in cache.get(("ns", "p"))["metadata"]  # type: ignore[index]


class ExpiringKube:
    """A cluster whose first watch answers 410 Gone, after an object changed while nobody
    watched: only a fresh list shows the change."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.lists = 0
        self.watches: list[str] = []

    def list(self, resource: object, *, namespace: str | None, selector: str) -> JSON:
        self.lists += 1
        version = "5" if self.lists == 1 else "7"  # the change made in the gap
        return {"metadata": {"resourceVersion": version}, "items": [pod("p", version=version)]}

    def watch(self, resource: object, *, resource_version: str, **_: object) -> Iterator[JSON]:
        self.watches.append(resource_version)
        if len(self.watches) == 1:
            raise ExpiredError()
        self.stop.set()
        return iter([])


def test_an_expired_watch_lists_again_and_reports_the_change_made_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[str, str]] = []
    stop = threading.Event()
    kube = ExpiringKube(stop)
    cache = informer(seen)
    cache.kube = kube  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="autoscaler.clients.informer"):
        cache.run(stop)
    assert (kube.lists, kube.watches) == (2, ["5", "7"])  # the second watch starts after the list
    assert seen == [("ADDED", "5"), ("MODIFIED", "7")]
    assert "the watch of pods expired (410 Gone); listing again" in caplog.messages
