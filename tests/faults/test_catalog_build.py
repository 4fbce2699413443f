"""The rollout's in-process catalog build under faults: signals (out within the documented 10 s, words that
say no step ran, nothing left in the cache, a SIGTERM during the cleanup included) and a full disk."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from faults.processes import Rollout, wait_for


def _building(cache: Path) -> list[Path]:
    return list(cache.glob(".shopsim-*.tmp"))


@pytest.mark.parametrize("signals", [(signal.SIGINT,), (signal.SIGTERM,), (signal.SIGINT, signal.SIGTERM)],
                         ids=["SIGINT", "SIGTERM", "SIGINT-then-SIGTERM-during-cleanup"])
def test_a_signal_during_the_catalog_build(tmp_path: Path, rollouts: list[Rollout], signals) -> None:
    cache = tmp_path / "cache"
    run = Rollout(tmp_path / "runs", "r", "--products", "400000", cache=cache)  # minutes of build
    rollouts.append(run)
    wait_for(lambda: _building(cache), timeout=60, what="the catalog build to start")
    time.sleep(0.5)
    started = time.monotonic()
    for sig in signals:
        run.signal(sig)
        time.sleep(0.05)
    code = run.wait(timeout=30)
    took = time.monotonic() - started
    assert code == 128 + int(signals[0]), run.stderr
    assert took < 10.0, f"exit took {took:.1f}s after the signal"
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"interrupted by {signals[0].name}: before any step" in lines[0]
    assert "step was aborted" not in lines[0]
    assert sorted(p.name for p in cache.iterdir()) == [".shopsim-v1-seed0-p400000-t2000.sqlite.lock"]
    assert not (tmp_path / "runs" / "r").exists()


def test_a_full_disk_during_the_catalog_build_is_one_line_and_exit_2(tmp_path: Path, rollouts: list[Rollout]) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(cache)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs permission to mount a small tmpfs (run the fault suite as root, e.g. in a container)")
    try:
        run = Rollout(tmp_path / "runs", "r", "--products", "20000", cache=cache)
        rollouts.append(run)
        assert run.wait(timeout=120) == 2, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
        assert lines[0].startswith(f"shopsimrl rollout: refused: cannot build the catalog in {cache} (")
        assert "free some space there or choose another folder (--cache-dir or $SHOPSIMRL_CACHE)" in lines[0]
        assert not list(cache.glob("*.tmp")) and not list(cache.glob(".*.tmp"))
    finally:
        subprocess.run(["umount", str(cache)], check=False)
