"""Atomic file writes for training pods (standard library only).

The temporary file is named by `tempfile` in the target's own directory, never by the process id:
every container's first process is pid 1, so two pods sharing a checkpoint volume would write the
same temporary name, and a rename in one directory is atomic while one across file systems is not.
"""

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """`write` the file's contents to a fresh temporary file beside `path`, flush it to disk,
    then rename it over `path`: a reader sees the old file or the new one, never a part; on an
    error the temporary file is removed and `path` is untouched."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
