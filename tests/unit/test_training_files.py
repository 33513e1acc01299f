"""A checkpoint written atomically: a temporary file of its own beside it, then one rename."""

from pathlib import Path
from typing import BinaryIO

import pytest

from autoscaler.training.files import write_atomically


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_the_file_is_replaced_whole_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"old")
    seen: list[list[str]] = []

    def write(file: BinaryIO) -> None:
        file.write(b"new")
        seen.append(temporaries(tmp_path))
        assert path.read_bytes() == b"old"  # readers see the old file until the rename

    write_atomically(path, write)
    assert path.read_bytes() == b"new"
    assert [len(names) for names in seen] == [1]
    assert seen[0][0].startswith(".checkpoint.pt.")
    assert temporaries(tmp_path) == []


def test_two_writers_at_once_use_two_temporary_files(tmp_path: Path) -> None:
    """Two pods writing one checkpoint volume, both pid 1: neither loses its file to the other."""
    path = tmp_path / "checkpoint.pt"
    during: list[str] = []

    def inner(file: BinaryIO) -> None:
        file.write(b"inner")
        during.extend(temporaries(tmp_path))

    def outer(file: BinaryIO) -> None:
        file.write(b"outer")
        write_atomically(path, inner)

    write_atomically(path, outer)
    assert len(set(during)) == 2  # the outer's and the inner's
    assert path.read_bytes() == b"outer"  # the last rename wins, whole
    assert temporaries(tmp_path) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"old")

    def broken(file: BinaryIO) -> None:
        file.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, broken)
    assert path.read_bytes() == b"old"
    assert temporaries(tmp_path) == []
