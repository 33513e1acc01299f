"""The informer's cache: indexes follow updates, and a late watch event never rolls it back."""

from typing import Any

from autoscaler.clients.informer import Informer
from autoscaler.clients.kube import PODS

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
