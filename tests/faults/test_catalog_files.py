"""A catalog or its ``.sha256`` that is a FIFO or ``/dev/zero`` (which once hung the check forever or ended in
``MemoryError``), and a planted lock link next to a damaged catalog (which once gave a ``LockFileError``
traceback): real commands in processes of their own, each bounded by a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from faults.processes import free_port

from shopsimrl.env.build import build_catalog, checksum_path, verify_catalog

PRODUCTS = 300  # about half a second to build
TIMEOUT = 60  # a hang fails the test here instead of blocking the suite


def _shopsimrl(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shopsimrl.cli", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL, env={**os.environ, "SHOPSIMRL_CACHE": str(cache)})


def _replace(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("which", ["catalog", "checksum"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_catalog_or_checksum_that_is_a_fifo_or_dev_zero_is_rebuilt_with_a_message(tmp_path: Path, which: str,
                                                                                     kind: str) -> None:
    catalog = build_catalog(PRODUCTS, 5, tmp_path)
    _replace(catalog if which == "catalog" else checksum_path(catalog), kind)
    done = _shopsimrl("env", "build", "--products", str(PRODUCTS), "--seed", "5", "--cache-dir", str(tmp_path),
                      cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "is not a regular file" in done.stderr and "rebuilding it" in done.stderr
    assert catalog.is_file() and not catalog.is_symlink() and checksum_path(catalog).is_file()
    verify_catalog(catalog)


def test_opening_a_fifo_as_the_catalog_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "shopsim-v1-seed5-p300-t50.sqlite"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-c", "import sys; from shopsimrl.env.build import CatalogError\n"
                           "from shopsimrl.env.store import CatalogStore\n"
                           "try: CatalogStore(sys.argv[1])\nexcept CatalogError as exc: print(exc)", str(fifo)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert "is not a regular file" in done.stdout and "shopsimrl env build --products 300 --seed 5" in done.stdout


COMMANDS = {
    "rollout": ["rollout", "--products", str(PRODUCTS), "--catalog-seed", "5", "--steps", "1", "--view", "plain"],
    "env-build": ["env", "build", "--products", str(PRODUCTS), "--seed", "5"],
    "env-serve": ["env", "serve", "--products", str(PRODUCTS), "--seed", "5", "--port", str(free_port())],
    "env-play": ["env", "play", "--products", str(PRODUCTS), "--seed", "5"],
    "data-export": ["data", "export", "--products", str(PRODUCTS), "--seed", "5"],
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A damaged catalog (so every command must take the build lock) beside a lock link to another file;
    each command refuses without touching either, so the five share it."""
    root = tmp_path_factory.mktemp("planted")
    catalog = build_catalog(PRODUCTS, 5, root / "cache")
    with open(catalog, "r+b") as handle:
        handle.seek(catalog.stat().st_size // 2)
        handle.write(b"\xff" * 64)
    victim = root / "victim.txt"
    victim.write_bytes(b"another user's data\n")
    lock = catalog.with_name(f".{catalog.name}.lock")
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    return root / "cache", victim


@pytest.mark.parametrize("command", COMMANDS)
def test_a_lock_link_next_to_a_damaged_catalog_is_one_line_and_exit_2(tmp_path: Path, planted: tuple[Path, Path],
                                                                      command: str) -> None:
    cache, victim = planted
    args = [*COMMANDS[command], "--out", str(tmp_path / "out")] if command in ("rollout", "data-export") \
        else COMMANDS[command]
    done = _shopsimrl(*args, cache=cache)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "refused: the lock file" in done.stderr and "is a symbolic link" in done.stderr
    assert victim.read_bytes() == b"another user's data\n"
