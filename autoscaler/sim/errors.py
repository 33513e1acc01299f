"""The one error every simulator loader raises: which file, which line, what is wrong."""

from pathlib import Path


class SimInputError(ValueError):
    """Bad simulator input. `line` is 1-based (the header is line 1); None = the file as a whole."""

    def __init__(self, file: str | Path, line: int | None, reason: str) -> None:
        self.file = str(file)
        self.line = line
        self.reason = reason
        where = self.file if line is None else f"{self.file}:{line}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[type["SimInputError"], tuple[str, int | None, str]]:
        return (SimInputError, (self.file, self.line, self.reason))
