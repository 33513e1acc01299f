"""Objects two operators made from one manifest, compared: names, uids, timestamps and the
namespace normalised away, each remaining difference a path with both values."""

from typing import Any

JSON = dict[str, Any]
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def normalised(obj: JSON) -> JSON:
    """`obj` without what the API server sets per object and without its namespace."""
    metadata = {k: v for k, v in obj["metadata"].items() if k not in (*SERVER_SET, "namespace")}
    refs = [{k: v for k, v in r.items() if k != "uid"} for r in metadata.get("ownerReferences", [])]
    if refs:
        metadata["ownerReferences"] = refs
    kept = {**obj, "metadata": metadata}
    return {k: v for k, v in kept.items() if k not in ("status", "apiVersion", "kind")}


def differences(ours: Any, theirs: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, ours, theirs) for every leaf that differs; lists of named items (containers, env,
    ports) are compared by name, other lists by position."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [
            d
            for key in sorted(set(ours) | set(theirs))
            for d in differences(ours.get(key), theirs.get(key), f"{path}.{key}")
        ]
    if isinstance(ours, list) and isinstance(theirs, list):
        if all(isinstance(i, dict) and "name" in i for i in [*ours, *theirs]):
            order = [i["name"] for i in ours] + [i["name"] for i in theirs]
            mine = {i["name"]: i for i in ours}
            other = {i["name"]: i for i in theirs}
            found = [
                d
                for name in dict.fromkeys(order)
                for d in differences(mine.get(name), other.get(name), f"{path}[{name}]")
            ]
            if not found and [i["name"] for i in ours] != [i["name"] for i in theirs]:
                found.append(
                    (f"{path}(order)", [i["name"] for i in ours], [i["name"] for i in theirs])
                )
            return found
        if len(ours) == len(theirs):
            return [
                d
                for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
                for d in differences(a, b, f"{path}[{i}]")
            ]
    return [] if ours == theirs else [(path, ours, theirs)]
