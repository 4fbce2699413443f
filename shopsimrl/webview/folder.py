"""The served folder's files, read safely: inside the folder only, never through a symlink, bounded, cached.

Every path the web app opens is built here from plain names (a run's name, ``step-<k>``, ``g0012-s3.json``):
a name is checked against its pattern, every folder on the way is checked not to be a symbolic link, and
the file itself is opened with ``O_NOFOLLOW`` (:func:`shopsimrl.io.open_regular_file`), so neither ``..`` nor
a planted link can leave the folder.  Files are read whole but bounded by kind, and parsed ones are kept in a
small LRU keyed by the file's inode, size and modification time, so a page read twice costs a ``stat``.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from shopsimrl.io import (
    BadFileError,
    parse_json_text,
    printable,
    read_bounded_bytes,
    read_bounded_text,
)

#: a run's folder name: the rule ``shopsimrl rollout --name`` enforces (rollout/outputs.py)
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
STEP_NAME = re.compile(r"step-([1-9][0-9]{0,6})")
#: what a run folder's top level may be told by
RUN_FILES = ("run.json", "metrics.jsonl")
#: size caps, by kind of file (a run's own files are far below them)
LIMITS = {"run.json": 1 << 20, "metrics.jsonl": 256 << 20, "events.jsonl": 64 << 20, "batch.jsonl": 64 << 20,
          "trace": 16 << 20, "triage": 4 << 20, "state": 64 << 20, "picture": 16 << 20, "marker": 1 << 20, "locks": 4 << 20}
LINE_LIMIT = 1 << 20  # characters of one JSONL line (a step's row, an event)
MAX_RUNS = 2000  # folders listed on the runs page
CACHE_BYTES = 16 << 20  # parsed files kept, counted by their size on disk (parsed, a file takes a few times more)


class OutsideError(BadFileError):
    """A name that is not a plain one, a path through a symbolic link, or nothing there: refused (a 404)."""


class Folder:
    """The folder ``shopsimrl view`` serves: one run folder, or a folder of run folders (``runs/``)."""

    def __init__(self, root: Path, *, cache_bytes: int = CACHE_BYTES) -> None:
        self.root = Path(os.path.realpath(root))
        self._cache: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()  # key -> (value, bytes)
        self._cached_bytes = 0
        self._cache_bytes = cache_bytes
        self._lock = threading.Lock()

    # -- where things are -----------------------------------------------------------------------------

    def is_run(self, path: Path) -> bool:
        return any(os.path.lexists(path / name) for name in RUN_FILES)

    def run_names(self) -> list[str]:
        """The runs served: the folder itself when it is a run, else its sub-folders that are (no symlinks)."""
        if self.is_run(self.root):
            return [self.root.name]
        names = []
        try:
            with os.scandir(self.root) as entries:
                for entry in entries:
                    if len(names) >= MAX_RUNS:
                        break
                    if RUN_NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False) \
                            and self.is_run(Path(entry.path)):
                        names.append(entry.name)
        except OSError as exc:
            raise BadFileError(f"cannot list {printable(self.root)}: {exc.strerror or exc}") from None
        return sorted(names)

    def run(self, name: str) -> Path:
        """The folder of run ``name``; :class:`OutsideError` unless it is one of :meth:`run_names`' kind."""
        if not RUN_NAME.fullmatch(name) or ".." in name:
            raise OutsideError(f"{printable(name, limit=60)!r} is not a run's name")
        if self.is_run(self.root):
            if name != self.root.name:
                raise OutsideError(f"no run named {printable(name, limit=60)!r} here")
            return self.root
        path = self.root / name
        self._plain_folder(path, f"run {name}")
        if not self.is_run(path):
            raise OutsideError(f"no run named {printable(name, limit=60)!r} here")
        return path

    def step(self, run: Path, step: int) -> Path:
        path = run / f"step-{step}"
        self._plain_folder(path, f"step-{step}")
        return path

    def steps(self, run: Path) -> list[int]:
        """The run's step numbers, from its ``step-<k>`` folders (symlinked ones left out), ascending."""
        found = []
        try:
            with os.scandir(run) as entries:
                for entry in entries:
                    match = STEP_NAME.fullmatch(entry.name)
                    if match and entry.is_dir(follow_symlinks=False):
                        found.append(int(match.group(1)))
        except OSError as exc:
            raise BadFileError(f"cannot list {printable(run.name)}: {exc.strerror or exc}") from None
        return sorted(found)

    def _plain_folder(self, path: Path, what: str) -> None:
        self._inside(path)
        try:
            info = os.lstat(path)
        except OSError:
            raise OutsideError(f"{printable(what)} does not exist") from None
        if stat.S_ISLNK(info.st_mode):
            raise OutsideError(f"{printable(what)} is a symbolic link: never followed")
        if not stat.S_ISDIR(info.st_mode):
            raise BadFileError(f"{printable(what)} is not a folder")

    def _inside(self, path: Path) -> None:
        resolved = os.path.realpath(path)
        if resolved != str(self.root) and not resolved.startswith(str(self.root) + os.sep):
            raise OutsideError(f"{printable(path.name)} leads outside the served folder")

    # -- reading ------------------------------------------------------------------------------------------

    def exists(self, path: Path) -> bool:
        return os.path.lexists(path)

    def stamp(self, path: Path) -> tuple[int, int, int] | None:
        """(inode, size, mtime) of a plain file; None when absent or anything else."""
        try:
            info = os.lstat(path)
        except OSError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns) if stat.S_ISREG(info.st_mode) else None

    def cached(self, kind: str, path: Path, read: Any) -> Any:
        """``read()``, or what it gave for the same file (same inode, size and mtime) before.  The values kept
        add up to at most the cache's bytes (by size on disk); a file larger than a quarter of it is never kept."""
        self._inside(path.parent)
        stamp = self.stamp(path)
        key = (kind, str(path), stamp)
        with self._lock:
            if stamp is not None and key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key][0]
        value = read()
        if stamp is not None and stamp[1] <= self._cache_bytes // 4:
            with self._lock:
                if key not in self._cache:
                    self._cache[key] = (value, stamp[1])
                    self._cached_bytes += stamp[1]
                while self._cached_bytes > self._cache_bytes:
                    _, (_, size) = self._cache.popitem(last=False)
                    self._cached_bytes -= size
        return value

    def json(self, path: Path, kind: str, *, keep: bool = True) -> Any:
        """A JSON file's value (any shape: the caller checks it); :class:`BadFileError` in one line.  ``keep``:
        cached (False for a large file read once for a few fields)."""
        def read() -> Any:
            text = read_bounded_text(path, LIMITS[kind], path.name, follow_symlinks=False)
            return parse_json_text(text, printable(self._shown(path)))
        return self.cached("json", path, read) if keep else (self._inside(path.parent), read())[1]

    def json_object(self, path: Path, kind: str) -> dict[str, Any]:
        found = self.json(path, kind)
        if not isinstance(found, dict):
            raise BadFileError(f"{printable(self._shown(path))} holds no JSON object")
        return found

    def jsonl(self, path: Path, kind: str) -> list[tuple[int, dict[str, Any]]]:
        """``(line, record)`` of every complete line, each a JSON object; a torn last line skipped (the file is
        being appended), as :func:`shopsimrl.io.read_jsonl_objects` reads them, the file's name worked out once."""
        def read() -> list[tuple[int, dict[str, Any]]]:
            text = read_bounded_text(path, LIMITS[kind], path.name, follow_symlinks=False)
            shown = printable(self._shown(path))
            records = []
            for number, line in enumerate(text.split("\n")[:-1], start=1):  # the last piece: torn or empty
                if not line.strip():
                    continue
                if len(line) > LINE_LIMIT:
                    raise BadFileError(f"{shown} line {number} is {len(line):,} characters long, more than "
                                       f"the {LINE_LIMIT:,} a line may be")
                found = parse_json_text(line, f"{shown} line {number}")
                if not isinstance(found, dict):
                    raise BadFileError(f"{shown} line {number} holds no JSON object")
                records.append((number, found))
            return records
        return self.cached("jsonl", path, read)

    def picture(self, path: Path) -> bytes:
        self._inside(path.parent)
        return read_bounded_bytes(path, LIMITS["picture"], path.name, follow_symlinks=False)

    def _shown(self, path: Path) -> str:
        """``path`` relative to the served folder (what a message names)."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return path.name


def held_locks() -> set[tuple[int, int, int]]:
    """(major, minor, inode) of every file an ``flock`` holds on this machine (Linux ``/proc/locks``): how a
    run is told running without touching its lock (taking it, even for a moment, could refuse a starting run)."""
    try:
        text = read_bounded_text("/proc/locks", LIMITS["locks"], "/proc/locks")
    except BadFileError:
        return set()
    held = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK":
            parts = fields[5].split(":")
            if len(parts) == 3:
                try:
                    held.add((int(parts[0], 16), int(parts[1], 16), int(parts[2])))
                except ValueError:
                    continue
    return held


def lock_is_held(path: Path, held: set[tuple[int, int, int]]) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino) in held
