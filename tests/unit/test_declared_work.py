"""A job's declared work as the training examples read it: `--total-samples` until the work file
holds a number, then that number, read again whenever the file is replaced."""

from pathlib import Path

import pytest

from autoscaler.training.files import write_atomically
from autoscaler.training.work import DeclaredWork


def write(path: Path, text: str) -> None:
    write_atomically(path, lambda file: file.write(text.encode()))


def test_without_a_file_the_work_is_the_declared_total(tmp_path: Path) -> None:
    assert DeclaredWork(200_000).total() == 200_000
    assert DeclaredWork(200_000, path=tmp_path / "total-samples").total() == 200_000


def test_a_written_total_replaces_it_and_is_read_again_when_replaced(tmp_path: Path) -> None:
    path, changes = tmp_path / "total-samples", []
    work = DeclaredWork(200_000, path=path, on_change=changes.append)
    write(path, "50000\n")
    assert work.total() == 50_000
    assert work.total() == 50_000
    write(path, "60000")
    assert work.total() == 60_000
    write(path, "60000")
    assert work.total() == 60_000
    assert changes == [50_000, 60_000]  # told once per new total


@pytest.mark.parametrize("text", ["", "fifty", "0", "-5", "nan", "inf"])
def test_an_unreadable_total_keeps_the_one_it_had(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, changes = tmp_path / "total-samples", []
    work = DeclaredWork(200_000, path=path, on_change=changes.append)
    write(path, text)
    assert work.total() == 200_000
    assert changes == []
    assert "is not a positive number; the work stays 200000" in capsys.readouterr().err
