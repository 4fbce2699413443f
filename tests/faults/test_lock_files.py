"""A lock file planted as a symlink (or a hard link) is refused: our PID never lands in the file it points at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from faults.processes import PRODUCTS

from shopsimrl.env.build import build_catalog, catalog_path
from shopsimrl.io import LockFileError, open_lock_file
from shopsimrl.rollout.outputs import LOCK_NAME, RunDirError, prepare_run_dir

PRECIOUS = b"another user's data\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(PRECIOUS)
    return victim


def test_open_lock_file_refuses_a_symlink_and_a_hard_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "sym.lock").symlink_to(victim)
    with pytest.raises(LockFileError, match="symbolic link"):
        open_lock_file(tmp_path / "sym.lock")
    os.link(victim, tmp_path / "hard.lock")
    with pytest.raises(LockFileError, match="hard link"):
        open_lock_file(tmp_path / "hard.lock")
    assert victim.read_bytes() == PRECIOUS
    fd = open_lock_file(tmp_path / "plain.lock")  # a plain lock file is made and reused
    os.close(fd)
    os.close(open_lock_file(tmp_path / "plain.lock"))


def test_a_symlinked_run_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    run = tmp_path / "runs" / "planted"
    run.mkdir(parents=True)
    (run / LOCK_NAME).symlink_to(victim)
    with pytest.raises(RunDirError, match="symbolic link"):
        prepare_run_dir(tmp_path / "runs", "planted", overwrite=True)
    assert victim.read_bytes() == PRECIOUS


def test_rollout_refuses_a_symlinked_run_lock_in_one_line(tmp_path: Path, fault_cache: Path) -> None:
    victim = _victim(tmp_path)
    run = tmp_path / "runs" / "planted"
    run.mkdir(parents=True)
    (run / LOCK_NAME).symlink_to(victim)
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "rollout", "--out", str(tmp_path / "runs"),
                           "--name", "planted", "--overwrite", "--steps", "1", "--products", str(PRODUCTS),
                           "--view", "plain"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SHOPSIMRL_CACHE": str(fault_cache)})
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert victim.read_bytes() == PRECIOUS


def test_a_symlinked_catalog_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    target = catalog_path(2000, 11, tmp_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.with_name(f".{target.name}.lock").symlink_to(victim)
    with pytest.raises(LockFileError, match="symbolic link"):
        build_catalog(2000, 11, tmp_path)
    assert victim.read_bytes() == PRECIOUS  # was left at 0 bytes
    assert not target.exists()
