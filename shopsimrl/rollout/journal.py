"""A run folder as a journal: each step ends with a completion marker, ``step-<k>/complete.json``, written last.

A step writes, in this order: its traces, triage and failure-queue lines (as groups finish),
``events.jsonl``, ``batch.jsonl``, the learner's ``policy.npz`` and ``eval.json``, ``state.json``
(what the next step needs of the run: the selector's state and the technical-failure
streak), ``metrics.json``, its line in ``metrics.jsonl``, and last ``complete.json``.  A step is
complete exactly when its marker exists: a crash (SIGKILL, a full disk) between any two of those
writes leaves a step without a marker, which ``--resume`` removes and runs again; nothing of a
step with a marker can be missing.

The marker is also what makes the folder checkable.  It holds the step's number, the run's id
(``run.json``'s ``run_id``, drawn at the start of the run), the digest of the run's options
(every ``run.json`` field that shapes results), the digest of the previous step's marker (a
chain: no earlier step can be swapped or edited unseen), and the SHA-256 and size of every file
at the top of the step folder (``traces/`` and ``triage/`` are counted, not hashed: nothing is
read back from them).  :func:`check_marker` verifies one step against all of it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.errors import InvariantBroken
from shopsimrl.io import atomic_write_json

MARKER = "complete.json"
STATE = "state.json"
#: The marker's format; a marker of another format is refused (the run was written by another version).
FORMAT = 1
#: run.json fields outside the options digest: ``steps`` (a resume may grow it), ``resumed`` (each resume adds
#: an entry) and ``run_id`` (the id itself).
OUTSIDE_DIGEST = ("steps", "resumed", "run_id")
#: Folders of a step whose files are counted in the marker, not hashed.
COUNTED = ("traces", "triage")
#: The largest marker, state or metrics file read back (a marker of a few hundred files is a few KB).
READ_LIMIT = 256 * 1024 * 1024


class JournalError(InvariantBroken, ValueError):
    """A step folder is not what its marker says (or cannot be read): the message names the file and the fault."""


def new_run_id() -> str:
    return secrets.token_hex(8)


def options_digest(record: Mapping[str, Any]) -> str:
    """SHA-256 of the run.json fields that shape results (all but :data:`OUTSIDE_DIGEST`), key order ignored."""
    shaping = {k: v for k, v in record.items() if k not in OUTSIDE_DIGEST}
    return hashlib.sha256(json.dumps(shaping, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _open_regular(path: Path) -> int:
    """A descriptor on ``path``, refused unless it is a regular file reached without a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise JournalError(f"{path} is missing") from None
    except OSError as exc:
        what = "a symbolic link" if path.is_symlink() else (exc.strerror or str(exc))
        raise JournalError(f"{path} cannot be read ({what})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JournalError(f"{path} is not a regular file")
    return fd


def file_digest(path: Path) -> tuple[str, int]:
    """(SHA-256, size) of a regular file (a symlink, a folder or a FIFO is refused)."""
    fd = _open_regular(path)
    digest, size = hashlib.sha256(), 0
    try:
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest(), size


def read_bytes(path: Path, limit: int = READ_LIMIT) -> bytes:
    """A regular file's bytes, at most ``limit`` of them (more: refused)."""
    fd = _open_regular(path)
    try:
        if os.fstat(fd).st_size > limit:
            raise JournalError(f"{path} is larger than {limit} bytes")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise JournalError(f"{path} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from a regular file (anything else: :class:`JournalError` naming the file)."""
    try:
        value = json.loads(read_bytes(path), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, JournalError):
            raise
        raise JournalError(f"{path} is not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(value, dict):
        raise JournalError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def step_contents(root: Path) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """What the marker records of a step folder: every top-level file's digest and size; each counted folder's
    number of files.  Hidden files (an atomic write's temporary) and the marker itself are left out."""
    files: dict[str, dict[str, Any]] = {}
    folders: dict[str, int] = {}
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name.startswith(".") or entry.name == MARKER:
            continue
        if entry.name in COUNTED and entry.is_dir(follow_symlinks=False):
            folders[entry.name] = sum(1 for e in os.scandir(entry.path) if not e.name.startswith("."))
        elif entry.is_file(follow_symlinks=False):
            sha, size = file_digest(Path(entry.path))
            files[entry.name] = {"sha256": sha, "bytes": size}
    return files, folders


@dataclass
class RunJournal:
    """The run's side of the markers: its id, its options' digest, and the last marker written (for the chain)."""

    run_id: str
    options: str  # options_digest(run.json)
    previous: str | None = None  # SHA-256 of the last complete step's marker
    written: list[int] = field(default_factory=list)  # steps completed by this process

    @classmethod
    def detached(cls) -> RunJournal:
        """A journal of its own (a step run outside ``run_rollout``, e.g. in a test): markers with no run.json."""
        return cls(new_run_id(), options_digest({}))

    def complete(self, root: Path, step: int) -> Path:
        """Write ``root/complete.json`` for ``step``: the step's last write (its files must all be in)."""
        files, folders = step_contents(root)
        record = {"format": FORMAT, "step": step, "run_id": self.run_id, "options": self.options,
                  "previous": self.previous, "files": files, "folders": folders}
        path = atomic_write_json(root / MARKER, record)
        self.previous = file_digest(path)[0]
        self.written.append(step)
        return path


def check_marker(root: Path, step: int, *, run_id: str, options: str, previous: str | None) -> tuple[dict[str, Any], str]:
    """Verify step ``step``'s folder against its marker; return (the marker, its SHA-256).

    Refused (:class:`JournalError`): a marker that is not this step's (number), not this run's (id, options),
    not the successor of the previous step's (chain), a file it lists that is missing or differs, a file it
    does not list, a counted folder with another number of files.
    """
    path = root / MARKER
    marker = read_json_object(path)
    if marker.get("format") != FORMAT:
        raise JournalError(f"{path}: format {marker.get('format')!r}, not {FORMAT} (written by another version)")
    got = marker.get("step")
    if type(got) is not int or got != step:
        raise JournalError(f"{path} is the marker of step {got!r}, not of step {step} (a folder copied or renamed)")
    if marker.get("run_id") != run_id:
        raise JournalError(f"{path} belongs to another run (run_id {marker.get('run_id')!r}, run.json says {run_id!r})")
    if marker.get("options") != options:
        raise JournalError(f"{path}: step {step} ran with other options than run.json records (run.json was edited)")
    if marker.get("previous") != previous:
        raise JournalError(f"{path} does not follow step {step - 1}'s marker (an earlier step was replaced or edited)")
    files, folders = marker.get("files"), marker.get("folders")
    if not isinstance(files, dict) or not isinstance(folders, dict):
        raise JournalError(f"{path} lists no files")
    present, counted = step_contents(root)
    for name, recorded in files.items():
        if name not in present:
            what = "is not a regular file" if os.path.lexists(root / name) else "is missing"
            raise JournalError(f"{root / name} {what} (step {step}'s marker lists it as a file)")
        if not isinstance(recorded, dict) or present[name] != recorded:
            raise JournalError(f"{root / name} differs from what step {step} wrote (its SHA-256 or size changed)")
    for name in present:
        if name not in files:
            raise JournalError(f"{root / name} was not written by step {step} (its marker does not list it)")
    if counted != folders:
        raise JournalError(f"{root}: the files in {', '.join(COUNTED)} are not those step {step} wrote "
                           f"({counted} now, {folders} then)")
    return marker, file_digest(path)[0]


def check_finite_metrics(metrics: Mapping[str, Any], path: Path) -> None:
    """Refuse to write a step's metrics with NaN or an infinity (strict JSON has neither): the step stays incomplete."""
    bad = sorted(k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v))
    if bad:
        raise UnwritableRecord(f"the step's metrics hold NaN or an infinity ({', '.join(bad[:5])}); not written",
                               path)


class UnwritableRecord(InvariantBroken, OSError):
    """A record the step refuses to write (its values are not finite): the step stops, incomplete and resumable."""

    def __init__(self, reason: str, path: Path) -> None:
        super().__init__(errno.EINVAL, reason, str(path))


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run continues: the first step to run, the journal's chain, and the saved run state."""

    first_step: int
    journal: RunJournal
    source: Any = None  # the selector as it stood after step first_step - 1 (None: a fresh one)
    guard: Mapping[str, Any] | None = None  # the technical-failure streak then ({"count", "recent"})
