"""JSONL appends on a disk that fills up: a short write is continued, a line that does not fit is cut back to
where it began (no torn line), and the error names the file; an atomic write's error names its file too."""

from __future__ import annotations

import errno
import os

import pytest

import shopsimrl.io as io_module
from shopsimrl.io import append_jsonl, atomic_write_json, read_jsonl


class Disk:
    """``os.write`` through a disk with ``room`` bytes left: short writes, then ENOSPC (for the io module only)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, room: int, *, chunk: int = 7) -> None:
        self.room = room
        self.calls = 0
        real = os.write

        def write(fd: int, data: bytes) -> int:
            self.calls += 1
            if self.room <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = min(len(data), self.room, chunk)  # never more than a few bytes at a time
            self.room -= n
            return real(fd, bytes(data[:n]))

        monkeypatch.setattr(io_module.os, "write", write)


def test_short_writes_are_continued_until_the_line_is_whole(tmp_path, monkeypatch):
    path = tmp_path / "failure_queue.jsonl"
    append_jsonl(path, {"step": 1})
    disk = Disk(monkeypatch, room=10_000)
    append_jsonl(path, {"step": 2, "task_id": "train-00042", "rewards": [0.0, 0.0, 0.0, 0.0]})
    assert disk.calls > 5  # the line took many short writes
    monkeypatch.undo()
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    assert path.read_text().endswith("\n")


def test_a_line_that_does_not_fit_is_cut_back_and_the_error_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "failure_queue.jsonl"
    append_jsonl(path, {"step": 1})
    before = path.read_bytes()
    Disk(monkeypatch, room=20)  # part of the next line fits, not all of it
    with pytest.raises(OSError) as full:
        append_jsonl(path, {"step": 2, "task_id": "train-00042", "rewards": [0.0, 0.0, 0.0, 0.0]})
    monkeypatch.undo()
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(path)
    assert str(path) in str(full.value)  # "No space left on device: '<path>'", not ": ?"
    assert path.read_bytes() == before  # no torn line


def test_a_full_disk_in_an_atomic_write_names_the_target(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    real_fsync = os.fsync

    def full(fd: int) -> None:
        real_fsync(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(io_module.os, "fsync", full)
    with pytest.raises(OSError) as failed:
        atomic_write_json(target, {"a": 1})
    monkeypatch.undo()
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary
