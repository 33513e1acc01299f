"""The decision log: one JSON object per job and round, appended to a file (JSON lines)."""

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


class DecisionLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        lines = "".join(json.dumps(record, default=str) + "\n" for record in records)
        with self._lock, self.path.open("a", encoding="utf-8") as log:
            log.write(lines)


def read_decision_log(path: Path) -> list[dict[str, Any]]:
    """Every record of a decision log, oldest first."""
    with path.open(encoding="utf-8") as log:
        return [json.loads(line) for line in log if line.strip()]
