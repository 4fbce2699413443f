"""Ray's own files (each session's logs and sockets) go to a folder of the test module, removed after it, not to /tmp/ray.

The folder is a short one in the system's temporary folder, not one of pytest's: Ray's Unix sockets live in it,
and a socket's path must stay under 108 bytes.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module", autouse=True)
def ray_tmpdir() -> Iterator[Path]:
    """``RAY_TMPDIR`` for Ray in this process and in the commands the tests start."""
    folder = Path(tempfile.mkdtemp(prefix="ray-"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_TMPDIR", str(folder))
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
