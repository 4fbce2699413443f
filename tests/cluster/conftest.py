"""Ray's own files (each session's logs and sockets) go to a folder of the test module, removed after it, not to /tmp/ray.

The folder is a short one in the system's temporary folder, not one of pytest's: Ray's Unix sockets live in it
(``<folder>/ray/session_<date>_<time>_<pid>/sockets/plasma_store``), and a socket's path must stay under 108 bytes.
When the temporary folder's own path leaves no room for that, Ray keeps its default (``$TMPDIR/ray``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: the longest folder Ray's socket paths leave room for: 107 bytes less "/ray/", a session's name (up to 42 with a
#: 7-digit PID) and "/sockets/plasma_store"
LONGEST_RAY_TMPDIR = 107 - len("/ray/") - 42 - len("/sockets/plasma_store")


@pytest.fixture(scope="module", autouse=True)
def ray_tmpdir() -> Iterator[Path | None]:
    """``RAY_TMPDIR`` for Ray in this process and in the commands the tests start (None: too long a path, Ray's default)."""
    folder = Path(tempfile.mkdtemp(prefix="ray-"))
    try:
        if len(str(folder)) > LONGEST_RAY_TMPDIR:
            yield None
            return
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_TMPDIR", str(folder))
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
