"""The API server's own count of who wrote what: its audit log, writes only (bench_operator).

A client can count its own requests, but upstream's operator is a Go binary the benchmark cannot
instrument; the API server sees both the same way. `flags(workdir)` makes kube-apiserver log every
write request (create, update, patch, delete, deletecollection) at level `Metadata`, once, when
its response is complete, synchronously (`blocking` mode: no event is dropped under load).
`AuditLog` reads the file as it grows; `writes` counts one client's writes in one namespace, the
client told apart by its User-Agent.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
CHUNK = 1 << 20
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: {json.dumps(list(WRITE_VERBS))}
  - level: None
"""


def flags(workdir: Path) -> list[str]:
    """kube-apiserver flags that log every write to `workdir/audit.log` (see `POLICY`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "audit-policy.yaml"
    policy.write_text(POLICY)
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={workdir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=100000",  # MB: never rotated during a run
    ]


def writes(entries: Iterable[JSON], *, agent: str, namespace: str) -> Counter[tuple[str, str]]:
    """(verb, resource[/subresource]) -> count of the completed writes in `namespace` whose
    User-Agent starts with `agent`."""
    found: Counter[tuple[str, str]] = Counter()
    for entry in entries:
        ref = entry.get("objectRef") or {}
        if (
            entry.get("stage") == "ResponseComplete"
            and entry.get("verb") in WRITE_VERBS
            and ref.get("namespace") == namespace
            and (entry.get("userAgent") or "").startswith(agent)
        ):
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += f"/{ref['subresource']}"
            found[entry["verb"], resource] += 1
    return found


class AuditLog:
    """One client's writes in one namespace (see `writes`), read from the audit log file as it
    grows a chunk at a time, keeping only the counts (little for the benchmark's RSS to carry)."""

    def __init__(self, path: Path, *, agent: str, namespace: str) -> None:
        self.path, self.agent, self.namespace = path, agent, namespace
        self.counts: Counter[tuple[str, str]] = Counter()
        self._offset = 0

    def poll(self) -> int:
        """Reads what was logged since the last call; returns the writes counted so far."""
        if not self.path.exists():
            return self.total
        with self.path.open("rb") as file:
            file.seek(self._offset)
            partial = b""
            while chunk := file.read(CHUNK):  # a chunk at a time: the file grows to tens of MB
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()  # a line still being written waits for the next call
                self._offset += len(chunk)
                parsed = (json.loads(line) for line in lines if line.strip())
                self.counts.update(writes(parsed, agent=self.agent, namespace=self.namespace))
            self._offset -= len(partial)
        return self.total

    @property
    def total(self) -> int:
        return sum(self.counts.values())
