"""Ctrl-C during a long command prints one line and exits 130, never a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


def test_ctrl_c_during_a_catalog_build_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shopsimrl.cli", "env", "build", "--products", "200000", "--cache-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".*.tmp")) and time.monotonic() < deadline:  # mid-write of the catalog
            time.sleep(0.05)
        assert list(tmp_path.glob(".*.tmp")), "the build never started writing"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "shopsimrl env build: interrupted"
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []  # no half catalog, no temp file
