"""Atomic writes: every file ShopSimRL leaves on disk is either whole or absent.

A crash between ``write`` and ``rename`` leaves only a hidden temporary file, never
half a trace, batch or metrics file.  JSONL appends write each record with one
``write`` call on an ``O_APPEND`` descriptor and ``fsync``, so a line is never
interleaved with another writer's and a crash can at worst lose the last line,
which readers skip because it does not end in a newline (see :func:`read_jsonl`).

Lock files (:func:`open_lock_file`) are opened without following a symlink and
refused when hard-linked, so a planted ``.lock`` cannot make us write into
(or truncate) a file it points at.

Bounded readers (:func:`read_bounded_text`, :func:`read_json_object`, :func:`read_jsonl_objects`)
read what another process or person left on disk: regular files only, a size cap per kind of
file, strict JSON of the expected shape; anything else is one :class:`BadFileError` line.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

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


def json_bytes(text: str) -> bytes:
    """JSON text as UTF-8.  A lone surrogate (half a pair, from a ``\\ud800`` escape in text a model wrote)
    has no UTF-8 form: it is written as that escape again, which outside JSON's strings cannot occur."""
    return text.encode("utf-8", "backslashreplace")


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_bytes(path, json_bytes(json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False)
                                               + "\n"))


def atomic_write_jsonl(path: str | os.PathLike[str], records: Iterable[Any]) -> Path:
    lines = [json.dumps(r, ensure_ascii=False, allow_nan=False) for r in records]
    return atomic_write_bytes(path, json_bytes("".join(line + "\n" for line in lines)))


def append_jsonl(path: str | os.PathLike[str], record: Any) -> None:
    """Append one JSON record as a single ``write`` on an ``O_APPEND`` descriptor (see :func:`_append_whole`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    line = json_bytes(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _naming(exc, target) from None
    try:
        _append_whole(fd, line, target)
    finally:
        os.close(fd)


ROOM_PROBE_BYTES = 64 << 10  # what a check of a folder writes: more than the smallest file of a step


def check_room(folder: str | os.PathLike[str], need: int = ROOM_PROBE_BYTES) -> None:
    """Write ``need`` bytes into ``folder`` (a hidden file, synced, then removed): an ``OSError`` naming the
    folder when they do not fit (a full disk, a quota) or cannot be written (a read-only disk), before any
    work that would find out only at its first output."""
    import errno  # here, not at the top: as in _append_whole

    target = Path(folder)
    probe = target / f".room-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            done = 0
            while done < need:
                written = os.write(fd, bytes(min(need - done, 1 << 16)))
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += written
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from None
    finally:
        probe.unlink(missing_ok=True)


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[Any]:
    """Yield the complete records of a JSONL file; a torn last line (no newline) is skipped."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.endswith("\n") and line.strip():
                yield json.loads(line)


# -- bounded, typed readers ------------------------------------------------------------------------------
# Files we did not write in this process (a run folder, a catalog's checksum) are read through these: a
# regular file only (a FIFO would block the reader forever, /dev/zero would fill the memory), at most
# ``limit`` bytes, UTF-8, and JSON of the expected shape.  Anything else is one :class:`BadFileError` line.

MAX_JSON_DEPTH = 32  # no file of ours nests deeper; deeper input is refused before it reaches the parser
_MAX_NUMBER = 2.0**53  # a larger integer would lose digits as a float (and 10**400 overflows one)
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))}


class BadFileError(Refusal, ValueError):
    """A file that is not what its reader expects (not a regular file, too big, not UTF-8, not JSON of the
    expected shape); the message is one line naming the file and what is wrong."""


def printable(text: object, *, limit: int = 200) -> str:
    """``text`` safe for a terminal line: C0/C1 control characters (escape sequences, newlines) shown as
    ``\\xNN``, cut at ``limit`` characters.  User data (folder names, labels) goes through this before print."""
    shown = str(text).translate(_CONTROL)
    return shown if len(shown) <= limit else shown[:limit] + "…"


def well_formed(text: str) -> str:
    """``text`` with every lone surrogate (half a UTF-16 pair: no UTF-8 form, so no encoder, socket or file
    takes it) replaced by U+FFFD, as a UTF-8 decoder shows a broken sequence.  Text from a model goes through
    this before it is used anywhere."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _named(path: str | os.PathLike[str], what: str) -> str:
    """``what`` and the path, once: "run.json /x/run.json" is just "/x/run.json"."""
    return printable(path) if Path(path).name == what else f"{what} {printable(path)}"


def _a(kind: str) -> str:
    return kind if kind == "null" else f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _size(count: int) -> str:
    return f"{count / 2**20:.0f} MiB" if count >= 2**20 else f"{count / 2**10:.0f} KiB" if count >= 2**10 \
        else f"{count} bytes"


def open_regular_file(path: str | os.PathLike[str], what: str, *, limit: int | None = None,
                      follow_symlinks: bool = True) -> BinaryIO:
    """Open ``path`` for reading, refusing (:class:`BadFileError`) anything but a regular file of at most
    ``limit`` bytes.  Opened non-blocking, so a FIFO is refused instead of waiting for a writer forever."""
    target = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(target, flags)
    except OSError as exc:
        if not follow_symlinks and target.is_symlink():
            raise BadFileError(f"{_named(target, what)} is a symbolic link; it must be a plain file") from None
        raise BadFileError(f"cannot read {_named(target, what)}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    problem = None
    if stat.S_ISDIR(info.st_mode):
        problem = "is a directory"
    elif not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file (a FIFO, a device or a socket)"
    elif limit is not None and info.st_size > limit:
        problem = f"is {_size(info.st_size)}, more than the {_size(limit)} such a file may hold"
    if problem is not None:
        os.close(fd)
        raise BadFileError(f"{_named(target, what)} {problem}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bounded_bytes(path: str | os.PathLike[str], limit: int, what: str, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (a file that grows past it while read: refused)."""
    with open_regular_file(path, what, limit=limit, follow_symlinks=follow_symlinks) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise BadFileError(f"{_named(path, what)} holds more than the {_size(limit)} such a file may hold")
    return data


def read_bounded_text(path: str | os.PathLike[str], limit: int, what: str, *, follow_symlinks: bool = True) -> str:
    """:func:`read_bounded_bytes`, decoded as UTF-8 (a binary file: refused)."""
    data = read_bounded_bytes(path, limit, what, follow_symlinks=follow_symlinks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadFileError(f"{_named(path, what)} is not UTF-8 text (byte {exc.start})") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _too_deep(text: str) -> bool:
    """More than MAX_JSON_DEPTH brackets open at once (strings skipped), checked without recursion."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif char in "]}":
            depth -= 1
    return False


def parse_json_text(text: str, where: str) -> Any:
    """Strict JSON: no NaN or Infinity, no number that overflows to infinity (``1e999``), at most
    :data:`MAX_JSON_DEPTH` levels; anything else is a :class:`BadFileError` naming ``where``."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _too_deep(text):
        raise BadFileError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise BadFileError(f"{where}: not valid JSON ({printable(exc, limit=120)})") from None


def read_json_object(path: str | os.PathLike[str], limit: int, what: str) -> dict[str, Any]:
    """A JSON file whose top level is an object (a list or a number: refused), read with the bounds above."""
    found = parse_json_text(read_bounded_text(path, limit, what), _named(path, what))
    if not isinstance(found, dict):
        raise BadFileError(f"{_named(path, what)} holds {_a(json_type(found))} in JSON, not an object")
    return found


def read_jsonl_objects(path: str | os.PathLike[str], limit: int, what: str, *,
                       line_limit: int = 1 << 20) -> list[tuple[int, dict[str, Any]]]:  # characters
    """``(line number, record)`` of every complete line of a JSONL file, each a JSON object; a torn last line
    (no newline) is skipped as :func:`read_jsonl` does, blank lines too; anything else is refused."""
    text = read_bounded_text(path, limit, what)
    records = []
    lines = text.split("\n")
    for number, line in enumerate(lines[:-1], start=1):  # the last piece has no newline: torn or empty
        if not line.strip():
            continue
        where = f"{_named(path, what)} line {number}"
        if len(line) > line_limit:
            raise BadFileError(f"{where} is {len(line):,} characters long, more than the {line_limit:,} a line may be")
        found = parse_json_text(line, where)
        if not isinstance(found, dict):
            raise BadFileError(f"{where} holds {_a(json_type(found))} in JSON, not an object")
        records.append((number, found))
    return records


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def json_number(record: dict[str, Any], key: str, where: str, *, minimum: float | None = None,
                maximum: float | None = None, whole: bool = False, optional: bool = True) -> float | None:
    """``record[key]`` as a finite number within ``[minimum, maximum]`` (``whole``: an integer value, 2.0
    included); absent or null gives None when ``optional``; anything else is a :class:`BadFileError`."""
    value = record.get(key)
    if value is None:
        if optional:
            return None
        raise BadFileError(f"{where}: {printable(key)} is {'null' if key in record else 'missing'}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadFileError(f"{where}: {printable(key)} is {_a(json_type(value))} ({printable(repr(value), limit=40)}), "
                           f"expected a number")
    if abs(value) > _MAX_NUMBER or not math.isfinite(value):
        raise BadFileError(f"{where}: {printable(key)} is out of range ({printable(repr(value), limit=40)})")
    if whole and value != int(value):
        raise BadFileError(f"{where}: {printable(key)} is {value!r}, expected a whole number")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"{'' if minimum is None else minimum}..{'' if maximum is None else maximum}"
        raise BadFileError(f"{where}: {printable(key)} is {value!r}, expected a number within {bounds}")
    return float(value)


def json_text(record: dict[str, Any], key: str, where: str, *, limit: int = 200) -> str | None:
    """``record[key]`` as a string of at most ``limit`` characters (None when absent or null)."""
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadFileError(f"{where}: {printable(key)} is {_a(json_type(value))}, expected a string")
    if len(value) > limit:
        raise BadFileError(f"{where}: {printable(key)} is {len(value)} characters long, more than {limit}")
    return value


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
            raise LockFileError(f"the lock file {printable(target)} is a symbolic link (to {printable(os.readlink(target))}); "
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
        raise LockFileError(f"the lock file {printable(target)} {problem}; lock files must be plain files of their own: "
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
