"""A job's declared work, which whoever runs the job may change while it trains (standard library
only).

    work = DeclaredWork(200_000, path=Path("/checkpoints/total"), on_change=reporter.set_total)
    while samples < work.total():
        ...

The total is `default` until `path` holds a number, then that number, read again whenever the
file changes (write it atomically: a temporary file renamed over it). Every process of the job
reads the same file once per step, so all of them end at the same step provided the new total is
a few steps ahead of the job's progress when it is written. An unreadable file keeps the total
it had, with one line on stderr.
"""

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path


class DeclaredWork:
    def __init__(
        self,
        default: float,
        *,
        path: Path | None = None,
        on_change: Callable[[float], None] | None = None,
    ) -> None:
        self._total = float(default)
        self._path = path
        self._on_change = on_change
        self._seen: tuple[int, int] | None = None  # (mtime_ns, inode) of the file last read

    def total(self) -> float:
        """The job's work now, in the unit of its progress."""
        if self._path is None:
            return self._total
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            return self._total
        seen = (stat.st_mtime_ns, stat.st_ino)
        if seen != self._seen:
            self._seen = seen
            self._read(self._path)
        return self._total

    def _read(self, path: Path) -> None:
        text = path.read_text().strip()
        try:
            total = float(text)
        except ValueError:
            total = math.nan
        if not math.isfinite(total) or total <= 0:
            message = f"{path}: {text!r} is not a positive number; the work stays {self._total:g}"
            print(message, file=sys.stderr)
            return
        if total != self._total:
            self._total = total
            if self._on_change is not None:
                self._on_change(total)
