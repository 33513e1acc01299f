"""What two operators made from one manifest, compared: the objects with names, uids, timestamps
and the namespace normalised away; a job's status with its timestamps dropped and its namespace
named alike; its Events as the set of their types and reasons. Each remaining difference is a
path with both values. The comparison is a pure function of two recorded observations, so it
can be run again on a recording (and on a deliberately broken one)."""

import re
from collections.abc import Iterable
from typing import Any

JSON = dict[str, Any]
Difference = tuple[str, Any, Any]  # (where, ours, theirs)
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
# When the operator wrote them, which no two runs share.
STATUS_TIMES = ("startTime", "completionTime", "lastReconcileTime")
CONDITION_TIMES = ("lastUpdateTime", "lastTransitionTime")
NAMESPACE = "<namespace>"
KEYS = ("name", "type")  # what names the items of a list, where each item has a distinct one


def normalised(obj: JSON) -> JSON:
    """`obj` without what the API server sets per object and without its namespace."""
    metadata = {k: v for k, v in obj["metadata"].items() if k not in (*SERVER_SET, "namespace")}
    refs = [{k: v for k, v in r.items() if k != "uid"} for r in metadata.get("ownerReferences", [])]
    if refs:
        metadata["ownerReferences"] = refs
    kept = {**obj, "metadata": metadata}
    return {k: v for k, v in kept.items() if k not in ("status", "apiVersion", "kind")}


def normalised_status(status: JSON | None, namespace: str) -> JSON:
    """A job's status without the times it was written at, `namespace` in its messages named
    `<namespace>` (so one namespace's job compares with another's)."""
    kept = {k: v for k, v in (status or {}).items() if k not in STATUS_TIMES}
    if "conditions" in kept:
        kept["conditions"] = [
            {
                **{k: v for k, v in cond.items() if k not in CONDITION_TIMES},
                **({"message": _renamed(cond["message"], namespace)} if "message" in cond else {}),
            }
            for cond in kept["conditions"]
        ]
    return kept


def _renamed(text: str, namespace: str) -> str:
    """`namespace` named `<namespace>` where it qualifies a name (`ns/name`, or `ns.name` as
    upstream's `ExitedWithCode` writes it)."""
    return re.sub(rf"\b{re.escape(namespace)}(/|\.(?=\w))", rf"{NAMESPACE}\1", text)


def event_kinds(events: Iterable[JSON], namespace: str) -> JSON:
    """`type/reason` -> the distinct messages of that kind of Event, `namespace` named
    `<namespace>`: how often one was sent is left out, as an event recorder folds repeats into
    one Event's count."""
    kinds: dict[str, set[str]] = {}
    for e in events:
        message = _renamed(e.get("message") or "", namespace)
        kinds.setdefault(f"{e.get('type')}/{e.get('reason')}", set()).add(message)
    return {kind: sorted(messages) for kind, messages in kinds.items()}


def differences(ours: Any, theirs: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, ours, theirs) for every leaf that differs; lists of named items (containers, env,
    ports; conditions by type) are compared by name, other lists by position."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [
            d
            for key in sorted(set(ours) | set(theirs))
            for d in differences(ours.get(key), theirs.get(key), f"{path}.{key}")
        ]
    if isinstance(ours, list) and isinstance(theirs, list):
        key = _key_of([*ours, *theirs], ours, theirs)
        if key is not None:
            order = [i[key] for i in ours] + [i[key] for i in theirs]
            mine = {i[key]: i for i in ours}
            other = {i[key]: i for i in theirs}
            found = [
                d
                for name in dict.fromkeys(order)
                for d in differences(mine.get(name), other.get(name), f"{path}[{name}]")
            ]
            if not found and [i[key] for i in ours] != [i[key] for i in theirs]:
                found.append((f"{path}(order)", [i[key] for i in ours], [i[key] for i in theirs]))
            return found
        if len(ours) == len(theirs):
            return [
                d
                for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
                for d in differences(a, b, f"{path}[{i}]")
            ]
    return [] if ours == theirs else [(path, ours, theirs)]


def _key_of(items: list[Any], *lists: list[Any]) -> str | None:
    """The first of KEYS every item has and no two items of one list share, if any."""
    for key in KEYS:
        named = items and all(isinstance(i, dict) and key in i for i in items)
        if named and all(len({i[key] for i in one}) == len(one) for one in lists):
            return key
    return None


def objects_key(obj: JSON) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def object_differences(ours: Iterable[JSON], theirs: Iterable[JSON]) -> list[Difference]:
    """Differences of two sets of objects, each named `Kind/name`: an object only one side made
    is one difference, its whole body against None."""
    mine = {objects_key(o): normalised(o) for o in ours}
    other = {objects_key(o): normalised(o) for o in theirs}
    return [(path.removeprefix("."), a, b) for path, a, b in differences(mine, other)]


def observed_differences(label: str, observation: JSON) -> list[Difference]:
    """Every difference of one recorded case, each labelled with `label` (and the step): objects
    `{"ours": [...], "theirs": [...]}`; lifecycles `{"steps": [[step, ours, theirs], ...],
    "events": [ours, theirs]}`."""
    if "steps" not in observation:
        found = object_differences(observation["ours"], observation["theirs"])
        return [(f"{label}: {p}", a, b) for p, a, b in found]
    stepped = [
        (f"{label} / {step}: {p}", a, b)
        for step, ours, theirs in observation["steps"]
        for p, a, b in differences(ours, theirs)
    ]
    ours, theirs = observation["events"]
    return stepped + [(f"{label} / events: {p}", a, b) for p, a, b in differences(ours, theirs)]
