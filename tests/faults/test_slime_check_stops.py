"""``shopsimrl slime check`` stopped while slime's legs run (probe row 8): nothing of it stays behind.

A fake slime whose ``train.py`` blocks (``shopsimrl/slime/harness/double/checkouts.py``: slime's modules
import, so the loop legs start, two at a time, and never end).  SIGTERM or SIGINT to the check:
it exits 128 + the signal in bounded time, one line, its legs killed by their PIDs and its
temporary folder removed.  SIGKILL to the check (it can clean nothing up): its legs still end,
killed by the kernel (the parent-death signal each leg arms first thing).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from faults.processes import wait_for
from local_processes import alive
from slime_harness.test_check import check

from shopsimrl.slime.harness.double import checkouts


def start_check(tree, scratch) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "shopsimrl.cli", "slime", "check", "--slime-src", str(tree)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(scratch)})


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_stopped_check_leaves_no_leg_and_no_folder(tmp_path, sig):
    tree = checkouts.blocking_train(tmp_path / "slime")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    check = start_check(tree, scratch)
    try:
        legs = wait_for(lambda: len(checkouts.pids(tree)) >= 2 and checkouts.pids(tree), 120,
                        "two loop legs running slime's train.py")
        assert all(alive(pid) for pid in legs)
        sent = time.monotonic()
        check.send_signal(sig)
        out, err = check.communicate(timeout=60)
        assert time.monotonic() - sent <= 20.0  # bounded (generous: this machine is shared)
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
    wait_for(lambda: not any(alive(pid) for pid in legs), 10, "the legs to end")
    if sig is signal.SIGKILL:
        assert check.returncode == -signal.SIGKILL
        return
    assert check.returncode == 128 + sig, (out, err)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[transformers]")]
    assert len(lines) == 1 and f"stopped by {sig.name}" in lines[0] and "Traceback" not in err, err
    assert list(scratch.iterdir()) == []


def test_a_slime_import_that_blocks_is_reported_within_a_minute_by_default(tmp_path):
    """The first process only imports slime: its own limit (--import-timeout, 45 s), not a leg's 600 s."""
    tree = checkouts.blocking_import(tmp_path / "slime")
    started = time.monotonic()
    code, verdicts, out = check(tree, tmp_path)
    assert time.monotonic() - started < 60, "a hanging import was not reported within a minute"
    assert code == 1 and "did not import within 45 s (--import-timeout)" in out, out
    assert not any(alive(pid) for pid in checkouts.pids(tree))
