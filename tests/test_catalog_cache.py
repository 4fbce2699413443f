"""A cached catalog is checked before use: a damaged one is rebuilt with a message or refused with the
command that rebuilds it, never served; a cancelled build leaves no temporary file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from shopsimrl.cli import main
from shopsimrl.env.build import (
    BuildCancelled,
    CatalogError,
    build_catalog,
    checksum_path,
    verify_catalog,
)
from shopsimrl.env.store import CatalogStore

PRODUCTS = 300  # about half a second to build; each test builds its own in its own folder


@pytest.fixture
def built(tmp_path: Path) -> Path:
    return build_catalog(PRODUCTS, 3, tmp_path)


def _truncate(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def _garbage(path: Path) -> None:
    """4 KiB of noise in the middle of the file: SQLite alone may not notice (the issue's silent bias)."""
    with open(path, "r+b") as handle:
        handle.seek(path.stat().st_size // 2)
        handle.write(os.urandom(4096))


def test_a_fresh_build_carries_a_checksum_that_sha256sum_reads(built: Path) -> None:
    line = checksum_path(built).read_text()
    assert line.endswith(f"  {built.name}\n") and len(line.split()[0]) == 64
    verify_catalog(built)


@pytest.mark.parametrize("damage", [_truncate, _garbage, lambda p: checksum_path(p).unlink()],
                         ids=["truncated", "4KiB-garbage", "no-checksum"])
def test_a_damaged_cache_is_rebuilt_with_a_message(built: Path, capsys: pytest.CaptureFixture[str], damage) -> None:
    damage(built)
    with pytest.raises(CatalogError, match="rebuild it with: shopsimrl env build --products 300 --seed 3"):
        verify_catalog(built)
    assert build_catalog(PRODUCTS, 3, built.parent) == built
    assert "; rebuilding it" in capsys.readouterr().err
    verify_catalog(built)
    store = CatalogStore(built)
    assert store.product_count == PRODUCTS and sum(store.task_counts().values()) == 50
    store.close()


@pytest.mark.parametrize("damage", [_truncate, lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)],
                         ids=["truncated", "header-only"])
def test_opening_a_damaged_file_directly_names_the_rebuild_command(built: Path, damage) -> None:
    damage(built)
    with pytest.raises(CatalogError, match=r"is damaged .*rebuild it with: shopsimrl env build --products 300"):
        CatalogStore(built)


def test_env_build_rebuilds_a_damaged_cache_and_says_so(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _garbage(built)
    assert main(["env", "build", "--products", str(PRODUCTS), "--seed", "3", "--cache-dir", str(built.parent)]) == 0
    out, err = capsys.readouterr()
    assert "is damaged" in err and "rebuilding it" in err and "built in" in out and "found cached" not in out
    verify_catalog(built)


def test_a_cancelled_build_stops_at_once_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    started = time.monotonic()
    with pytest.raises(BuildCancelled):
        build_catalog(200_000, 0, tmp_path, cancel=cancel)  # minutes to build
    assert time.monotonic() - started < 3.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shopsim-v1-seed0-p200000-t2000.sqlite.lock"]


def test_a_temporary_file_left_by_a_killed_build_is_removed_by_the_next(tmp_path: Path) -> None:
    stale = tmp_path / ".shopsim-v1-seed3-p300-t50.sqlite.99999.0badc0de.tmp"
    stale.write_bytes(b"")
    build_catalog(PRODUCTS, 3, tmp_path)
    assert not stale.exists()


@pytest.mark.parametrize("folder", ["/dev/null", "/dev/null/sub", "/proc/self/catalogs"])
def test_a_cache_folder_that_cannot_be_made_is_one_clear_error(folder: str) -> None:
    with pytest.raises(CatalogError, match=f"cannot make the catalog folder {folder} .*--cache-dir or"):
        build_catalog(PRODUCTS, 3, folder)


def _checksum_directory(path: Path) -> None:
    checksum_path(path).unlink()
    checksum_path(path).mkdir()


@pytest.mark.parametrize("damage", [
    lambda p: checksum_path(p).write_text("0" * 10_000),  # over the cap: never read whole
    lambda p: checksum_path(p).write_text(f"not-a-sha256  {p.name}\n"),
    lambda p: checksum_path(p).write_bytes(b"\xff\xfe" * 16),
    lambda p: checksum_path(p).write_text(""),
], ids=["oversized", "not-hex", "binary", "empty"])
def test_a_checksum_file_of_the_wrong_shape_is_rebuilt_with_a_message(built: Path, capsys, damage) -> None:
    damage(built)
    with pytest.raises(CatalogError, match="no usable checksum.*rebuild it with: shopsimrl env build"):
        verify_catalog(built)
    assert build_catalog(PRODUCTS, 3, built.parent) == built
    assert "no usable checksum" in capsys.readouterr().err
    verify_catalog(built)


def test_a_checksum_that_is_a_directory_is_one_line_and_a_catalog_that_is_one_is_refused(built: Path) -> None:
    _checksum_directory(built)
    with pytest.raises(CatalogError, match="is a directory"):
        verify_catalog(built)
    built.unlink()
    built.mkdir()
    with pytest.raises(CatalogError, match=f"the catalog {built} is a directory: remove it"):
        build_catalog(PRODUCTS, 3, built.parent)


def test_a_planted_catalog_lock_is_a_catalog_refusal_and_a_lock_file_error(tmp_path: Path) -> None:
    from shopsimrl.io import LockFileError

    target = tmp_path / "shopsim-v1-seed3-p300-t50.sqlite"
    target.with_name(f".{target.name}.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CatalogError, match="is a symbolic link") as refused:
        build_catalog(PRODUCTS, 3, tmp_path)
    assert isinstance(refused.value, LockFileError)  # the commands' CatalogError refusal covers it: exit 2
    assert not (tmp_path / "elsewhere").exists()
