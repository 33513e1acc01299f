"""A plain-text progress bar: redrawn in place on a terminal, a line per tenth elsewhere."""

import time
from typing import TextIO


class ProgressBar:
    """`title [#########-----------]  45%  label`, written to `stream` (usually stderr).

    Called as `bar(done, total, label)`; on a terminal the line is redrawn (at most every
    `min_seconds`), in a log or a pipe a new line is written each time another tenth is done.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        title: str = "simulating",
        width: int = 30,
        min_seconds: float = 0.1,
        tty: bool | None = None,
    ) -> None:
        self.stream, self.title, self.width = stream, title, width
        self.min_seconds = min_seconds
        self.tty = stream.isatty() if tty is None else tty
        self._drawn_at = -float("inf")
        self._tenths = -1
        self._open = False

    def __call__(self, done: int, total: int, label: str) -> None:
        share = min(1.0, done / total) if total > 0 else 1.0
        if self.tty:
            now = time.monotonic()
            if share < 1.0 and now - self._drawn_at < self.min_seconds:
                return
            self._drawn_at = now
            self.stream.write("\r" + self.line(share, label) + "\x1b[K")
            self._open = True
        else:
            tenths = int(share * 10)
            if tenths == self._tenths:
                return
            self._tenths = tenths
            self.stream.write(self.line(share, label) + "\n")
        self.stream.flush()

    def line(self, share: float, label: str) -> str:
        filled = round(share * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        return f"{self.title} [{bar}] {share:4.0%}  {label}".rstrip()

    def close(self) -> None:
        """End the redrawn line, so what is printed next starts on a line of its own."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
