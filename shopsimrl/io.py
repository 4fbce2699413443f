"""Atomic writes: every file ShopSimRL leaves on disk is either whole or absent.

A crash between ``write`` and ``rename`` leaves only a hidden temporary file, never
half a trace, batch or metrics file.  JSONL appends write each record with one
``write`` call on an ``O_APPEND`` descriptor and ``fsync``, so a line is never
interleaved with another writer's and a crash can at worst lose the last line,
which readers skip because it does not end in a newline (see :func:`read_jsonl`).

Lock files (:func:`open_lock_file`) are opened without following a symlink and
refused when hard-linked, so a planted ``.lock`` cannot make us write into
(or truncate) a file it points at.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from shopsimrl.errors import Refusal


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o644)  # mkstemp makes 0600; outputs are meant to be shared
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _naming(exc, target) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False) + "\n")


def atomic_write_jsonl(path: str | os.PathLike[str], records: Iterable[Any]) -> Path:
    lines = [json.dumps(r, ensure_ascii=False, allow_nan=False) for r in records]
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


def append_jsonl(path: str | os.PathLike[str], record: Any) -> None:
    """Append one JSON record as a single ``write`` on an ``O_APPEND`` descriptor (see :func:`_append_whole`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _naming(exc, target) from None
    try:
        _append_whole(fd, line, target)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[Any]:
    """Yield the complete records of a JSONL file; a torn last line (no newline) is skipped."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.endswith("\n") and line.strip():
                yield json.loads(line)


class LockFileError(Refusal, OSError):
    """A lock file that is not a plain file of its own (a symlink, a hard link, a FIFO...): never used."""


def open_lock_file(path: str | os.PathLike[str]) -> int:
    """Open (or create) ``path`` for an ``flock`` and return its descriptor, never following a symlink.

    Not truncated on open: the caller writes into it only once it holds the lock.  Refused
    (:class:`LockFileError`, saying what to remove) when ``path`` is a symlink, a hard link to
    another file, or not a regular file.
    """
    target = Path(path)
    try:
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError:
        if target.is_symlink():
            raise LockFileError(f"the lock file {target} is a symbolic link (to {os.readlink(target)}); "
                                f"lock files are never followed: remove it and try again") from None
        raise
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_nlink != 1:
        problem = f"is a hard link ({info.st_nlink} names for one file)"
    if problem is not None:
        os.close(fd)
        raise LockFileError(f"the lock file {target} {problem}; lock files must be plain files of their own: "
                            f"remove it and try again")
    os.set_blocking(fd, True)
    return fd


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` with the file it concerns: a write's ``ENOSPC`` carries no file name of its own."""
    if exc.filename is not None or exc.errno is None:
        return exc
    named = OSError(exc.errno, exc.strerror or str(exc), str(path))  # the errno's own subclass
    named.__traceback__ = exc.__traceback__
    return named


def _append_whole(fd: int, data: bytes, path: Path) -> None:
    """Append ``data`` whole or not at all: a short write (a disk that fills up mid-line) is continued, and when
    the rest cannot be written the file is cut back to where the line began, so no torn line is left.  An
    error names ``path``."""
    import errno  # here, not at the top: this file's imports are shared with other readers' helpers

    start = os.fstat(fd).st_size  # O_APPEND: the line starts at the end (one writer: the run holds the lock)
    done = 0
    try:
        while done < len(data):
            written = os.write(fd, data[done:])
            if written <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # nothing more fits
            done += written
        os.fsync(fd)
    except OSError as exc:
        if done:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass  # the torn tail stays; readers skip a last line without its newline
        raise _naming(exc, path) from None
