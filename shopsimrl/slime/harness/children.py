"""The check's child processes (slime's legs, the surface probe): each with a time limit, each stopped by its PID.

slime is imported only in children, so a slime whose import blocks, or whose loop never
ends, cannot hang the check: a child still running at its time limit is killed
(SIGKILL to the process group the child leads, named by the child's PID) and reported.
When the check itself is stopped (SIGTERM, SIGINT), :meth:`Children.kill_all` kills every
child still running the same way, and no new one starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A leg runs slime's loop for 80 steps: minutes on a loaded 2-core machine; a blocked import never ends.
DEFAULT_TIMEOUT_SECONDS = 600.0
#: The first child only imports slime and reads its signatures (about 15 s on a loaded 2-core machine): a slime
#: whose import hangs is reported within a minute, not after a leg's whole limit.
DEFAULT_IMPORT_TIMEOUT_SECONDS = 45.0
#: The check's PID, in each child's environment (see :func:`die_with_parent`).
PARENT_ENV = "SHOPSIM_SLIME_CHECK_PARENT"
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ChildExit:
    """How a child ended: its exit status, or ``None`` when it was killed (time limit) or never started (stopping)."""

    returncode: int | None
    timed_out: bool = False
    stopped: bool = False
    seconds: float = 0.0


class Children:
    """Runs children (from any thread); each in its own session, so it and whatever it started die together."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.timeout = timeout
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._stopping = False

    def run(self, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
            timeout: float | None = None) -> ChildExit:
        """Run ``argv`` to its end or its time limit (``timeout``, else the children's), its output to ``log``."""
        with self._lock:
            if self._stopping:
                return ChildExit(None, stopped=True)
            with open(log, "wb") as out:
                process = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                           env={**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())})
            self._running[process.pid] = process
        started = time.monotonic()
        try:
            returncode: int | None = process.wait(timeout=self.timeout if timeout is None else timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
        finally:  # also when the wait is cut short (the check stopped by a signal): the child never outlives it
            _kill_group(process)
            with self._lock:
                self._running.pop(process.pid, None)
        with self._lock:
            stopped = self._stopping and (returncode is None or returncode < 0)  # killed by kill_all
        return ChildExit(None if stopped else returncode, timed_out=timed_out and not stopped, stopped=stopped,
                        seconds=time.monotonic() - started)

    def kill_all(self) -> None:
        """Kill every child still running; start no other."""
        with self._lock:
            self._stopping = True
            running = list(self._running.values())
        for process in running:
            _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (its PID names it) and reap the child; a group already gone is fine."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def child_env(folder: Path) -> dict[str, str]:
    """The environment of a slime child run in ``folder``: ours, unbuffered, and its temporary files in
    ``folder/tmp``.  slime imports wandb, which makes two temporary folders a process and removes them at exit;
    the children end with ``os._exit``, so without this each child would leave them in the system's /tmp."""
    tmp = folder / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp)}


def child_result(out: Path, log: Path, ended: ChildExit, timeout: float) -> dict[str, Any]:
    """What a child wrote to ``out``, or why it wrote nothing (``status`` None)."""
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    if ended.stopped:
        return {"status": None, "error": "the check was stopped before slime's process ended"}
    if ended.timed_out:
        return {"status": None, "error": f"slime's process did not end within {timeout:g} s and was killed:\n{tail}"}
    if not out.is_file():
        return {"status": None, "error": f"slime's process exited early (exit status {ended.returncode}) without "
                                         f"its result:\n{tail}"}
    try:
        return dict(json.loads(out.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        return {"status": None, "error": f"slime's process left an unreadable result ({exc}):\n{tail}"}


def die_with_parent() -> None:
    """In a child, first thing: SIGKILL it when the check ends, however it ends (kill -9 included); Linux only.

    A check killed outright cannot kill its children itself; without this, a leg whose slime
    blocks would outlive it.  A check already gone before the prctl: the child ends at once.
    """
    parent = os.environ.get(PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes  # only here, in a child on Linux: the check's own process never needs it

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(parent):
        os._exit(1)
