"""No run destroys another run's folder; a full or read-only disk is reported, not a traceback; a run killed or
out of space between any two writes of a step resumes to the uninterrupted run, and a run with a gap is refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.processes import HERE, ROLLOUT_ARGS, EnvServer, Rollout, check_files_whole, wait_for

from shopsimrl.io import read_jsonl


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
    assert "the disk is full" in run.stderr and "is incomplete (no complete.json)" in run.stderr
    assert "Traceback" not in run.stderr and "never retrieved" not in run.stderr
    steps = run.step_dirs()
    assert steps and not (steps[-1] / "complete.json").exists()
    assert not list(run.root.rglob("*.tmp"))
    done = [s for s in steps if (s / "complete.json").exists()]
    assert done == steps[:-1]
    for step in done:  # every finished step is whole
        json.loads((step / "metrics.json").read_text())
        assert (step / "batch.jsonl").read_text().endswith("\n")
    wait_for(lambda: server.leased() == 0, 30, "every slot released")
    before = {step.name: files_of(step) for step in done}
    # still full: a resume is refused before it plays a step (it used to play one whole step first)
    everything = {name: data for name, data in files_of(run.root).items() if name != ".lock"}
    refused = Rollout(small_disk, "full", "--env", server.url, "--steps", str(len(done) + 1), "--episode-concurrency",
                      "32", "--resume")
    rollouts.append(refused)
    assert refused.wait(timeout=60) == 2, refused.stderr
    assert "cannot write in the run folder" in refused.stderr and "no step was played" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert {name: data for name, data in files_of(run.root).items() if name != ".lock"} == everything
    # more room, and the run continues: the incomplete step runs again, no complete step is lost or run again
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    more = Rollout(small_disk, "full", "--env", server.url, "--steps", str(len(done) + 1), "--episode-concurrency",
                   "32", "--resume")
    rollouts.append(more)
    assert more.wait(timeout=120) == 0, more.stderr
    assert [row["step"] for row in read_jsonl(run.root / "metrics.jsonl")] == list(range(1, len(done) + 2))
    assert {step.name: files_of(step) for step in done} == before
    check_files_whole(run.root)


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


# -- a step cut short between two of its writes ------------------------------------------------------------------
#: One episode at a time: two runs decide alike, so a resumed run can be compared with an uninterrupted one; small
#: steps (2 groups of 2 kept, waves of 4), as each crash costs a process.
ONE_AT_A_TIME = ["--episode-concurrency", "1", "--rollout-batch-size", "2", "--n-samples-per-prompt", "2",
                 "--over-sampling-batch-size", "4", "--global-batch-size", "4"]
TIMED = ("seconds", "per_second")


class CrashingRollout(Rollout):
    """``shopsimrl rollout`` (crashing_rollout.py) that dies at one write: ``crash`` is ``kill:<suffix>`` (SIGKILL)
    or ``enospc:<suffix>`` (the write fails as on a full disk)."""

    def __init__(self, out: Path, name: str, *args: str, crash: str = "") -> None:
        self.root = out / name
        env = {**os.environ, "SHOPSIMRL_CRASH_AT": crash}
        self.proc = subprocess.Popen([sys.executable, str(HERE / "crashing_rollout.py"), *ROLLOUT_ARGS, "--out",
                                      str(out), "--name", name, *args],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.stdout = ""
        self.stderr = ""


@pytest.fixture(scope="module")
def quiet_server(fault_cache: Path) -> Iterator[EnvServer]:
    server = EnvServer(fault_cache, "--slots", "8").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def uninterrupted(quiet_server: EnvServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two steps without a crash, the reference of every resumed run."""
    run = CrashingRollout(tmp_path_factory.mktemp("whole"), "whole", "--env", quiet_server.url, "--steps", "2",
                          *ONE_AT_A_TIME)
    try:
        assert run.wait(timeout=180) == 0, run.stderr
    finally:
        run.stop()
    return run.root


def untimed_rows(root: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if not any(t in k for t in TIMED)} for row in read_jsonl(root / "metrics.jsonl")]


def kept_episodes(root: Path, k: int) -> list[dict]:
    return [{key: v for key, v in row.items() if key != "trace_path"} for row in read_jsonl(root / f"step-{k}" / "batch.jsonl")]


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


#: Each write of step 2 in turn, from its first end-of-step write to its marker: a SIGKILL just before it, and a
#: full disk at the two writes that end the step (its metrics.jsonl line, its marker).  Each crash hits a resumed
#: run (the first, a fresh one), which starts at step 2.  A crash just before the marker leaves step 2's line in
#: metrics.jsonl, which the next resume removes (a rewrite of metrics.jsonl): the last full disk hits that
#: rewrite, so the resume itself is refused in one line (exit 2) and the folder stays resumable.
CRASHES = [*(f"kill:step-2/{name}" for name in ("events.jsonl", "batch.jsonl", "state.json", "metrics.json")),
           "kill:metrics.jsonl", "enospc:metrics.jsonl", "enospc:step-2/complete.json", "kill:step-2/complete.json",
           "enospc:metrics.jsonl"]


def test_a_step_cut_between_any_two_writes_is_run_again_on_resume_and_nothing_else(quiet_server, uninterrupted,
                                                                                    tmp_path, rollouts):
    args = ["--env", quiet_server.url, *ONE_AT_A_TIME, "--steps", "2"]
    root, step_1 = tmp_path / "cut", None
    for n, crash in enumerate(CRASHES):
        run = CrashingRollout(tmp_path, "cut", *args, *(["--resume"] if n else []), crash=crash)
        rollouts.append(run)
        code = run.wait(timeout=180)
        if crash.startswith("kill:"):
            assert code == -signal.SIGKILL, f"{crash}: {run.stderr}"
        elif n == len(CRASHES) - 1:  # the resume's own rewrite of metrics.jsonl
            assert code == 2 and "could not be continued (No space left on device" in run.stderr, run.stderr
        else:
            assert code == 1 and "the disk is full" in run.stderr and "incomplete (no complete.json)" in run.stderr
        if not crash.startswith("kill:"):
            assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
            assert crash.split(":")[1] in run.stderr  # the message names the file
        assert (root / "step-1" / "complete.json").exists() and not (root / "step-2" / "complete.json").exists()
        step_1 = step_1 or files_of(root / "step-1")
        assert files_of(root / "step-1") == step_1, crash  # the complete step was never run again
    resumed = Rollout(tmp_path, "cut", *args, "--resume")
    rollouts.append(resumed)
    assert resumed.wait(timeout=180) == 0, resumed.stderr
    assert files_of(root / "step-1") == step_1
    assert [row["step"] for row in read_jsonl(root / "metrics.jsonl")] == [1, 2]
    assert untimed_rows(root) == untimed_rows(uninterrupted)
    for k in (1, 2):
        assert kept_episodes(root, k) == kept_episodes(uninterrupted, k)
    assert [r["from_step"] for r in json.loads((root / "run.json").read_text())["resumed"]] == [2] * (len(CRASHES) - 1)
    check_files_whole(root)


def test_a_run_with_a_missing_step_is_refused_and_its_later_steps_kept(quiet_server, uninterrupted, tmp_path,
                                                                        rollouts):
    root = tmp_path / "gap"
    shutil.copytree(uninterrupted, root)
    shutil.rmtree(root / "step-1")
    later = files_of(root / "step-2")
    run = Rollout(tmp_path, "gap", "--env", quiet_server.url, *ONE_AT_A_TIME, "--steps", "3", "--resume")
    rollouts.append(run)
    assert run.wait(timeout=120) == 2
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "step 1 is missing but step-2 exists" in run.stderr
    assert files_of(root / "step-2") == later and not (root / "step-3").exists()
