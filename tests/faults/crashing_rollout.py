"""``shopsimrl rollout`` that dies at one write of its run folder: ``SHOPSIMRL_CRASH_AT=kill:step-2/metrics.json``.

Run as a script by the fault tests.  Just before the first write (an atomic write's rename, or a JSONL append)
whose path ends with the given suffix (``...@N``: the N-th such write), the process sends itself SIGKILL
(``kill:``), or the write fails with ENOSPC as on a full disk (``enospc:``).  Every earlier write is done,
none later: the crash falls between two writes of a step.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path

import shopsimrl.io
from shopsimrl.commands.rollout import main

_MODE, _, _WHERE = os.environ.get("SHOPSIMRL_CRASH_AT", "").partition(":")
_SUFFIX, _, _NTH = _WHERE.partition("@")
_replace, _append = os.replace, shopsimrl.io._append_whole
_seen = [int(_NTH or 1)]  # writes of the suffix still to go until the crash


def _crash_before(target: object) -> None:
    if _SUFFIX and str(target).endswith(_SUFFIX):
        _seen[0] -= 1
        if _seen[0]:
            return
        if _MODE == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))


def _replace_or_crash(src: str, dst: str) -> None:
    _crash_before(dst)
    _replace(src, dst)


def _append_or_crash(fd: int, data: bytes, path: Path) -> None:
    _crash_before(path)
    _append(fd, data, path)


os.replace = _replace_or_crash  # type: ignore[assignment]
shopsimrl.io._append_whole = _append_or_crash

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
