"""No run destroys another run's folder; a full or read-only disk is reported, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.processes import Rollout, check_files_whole, wait_for


def test_a_second_run_with_the_same_name_is_refused_while_the_first_runs(server, rollouts, tmp_path):
    first = Rollout(tmp_path, "same", "--env", server.url, "--steps", "6", "--episode-concurrency", "32",
                    turn_seconds=0.1)
    rollouts.append(first)
    wait_for(first.mid_step, 60, "the first run under way")
    second = Rollout(tmp_path, "same", "--env", server.url, "--overwrite")
    rollouts.append(second)
    assert second.wait(timeout=60) == 2
    assert "in use by another running rollout" in second.stderr
    assert first.wait(timeout=120) == 0, first.stderr
    assert len((first.root / "metrics.jsonl").read_text().splitlines()) == 6
    check_files_whole(first.root)
    again = Rollout(tmp_path, "same", "--env", server.url)  # finished: kept unless --overwrite
    rollouts.append(again)
    assert again.wait(timeout=60) == 2 and "pass --overwrite" in again.stderr
    assert len((first.root / "metrics.jsonl").read_text().splitlines()) == 6


def _mount_tmpfs(where: Path, *options: str) -> bool:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)],
                          capture_output=True)
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "size=256k"):
        pytest.skip("needs permission to mount a small tmpfs (run the fault suite as root, e.g. in a container)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_is_reported_and_earlier_steps_stay_whole(server, rollouts, small_disk):
    run = Rollout(small_disk, "full", "--env", server.url, "--steps", "50", "--episode-concurrency", "32")
    rollouts.append(run)
    assert run.wait(timeout=120) == 1
    assert "the disk is full" in run.stderr and "is incomplete" in run.stderr
    assert "Traceback" not in run.stderr and "never retrieved" not in run.stderr
    steps = run.step_dirs()
    assert steps and not (steps[-1] / "metrics.json").exists()
    assert not list(run.root.rglob("*.tmp"))
    done = [s for s in steps if (s / "metrics.json").exists()]
    for step in done:  # every finished step is whole
        json.loads((step / "metrics.json").read_text())
        assert (step / "batch.jsonl").read_text().endswith("\n")
    wait_for(lambda: server.leased() == 0, 30, "every slot released")


def test_a_read_only_out_is_refused(tmp_path, rollouts, server):
    disk = tmp_path / "ro"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "size=64k", "ro"):
        pytest.skip("needs permission to mount a read-only tmpfs")
    try:
        run = Rollout(disk, "r", "--env", server.url)
        rollouts.append(run)
        assert run.wait(timeout=60) == 2
        assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "argument --out: cannot write in" in run.stderr and "Read-only file system" in run.stderr
    finally:
        subprocess.run(["umount", str(disk)], check=False)
