"""What the viewer's tests share: a real run made by the main job, and ``shopsimrl view`` as a real process.

The run is ``shopsimrl rollout`` itself (in-process env, heuristic policy, the GRPO learner with an
evaluation every step, small knobs) with a fault rate, so it holds kept, zero-spread and technical groups,
a model's mistakes and technical failures.  The server is started on port 0 and stopped by its PID.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shopsimrl.commands import rollout as cli
from shopsimrl.env.build import build_catalog

PRODUCTS = 2_000
RUN_OPTIONS = ["--products", str(PRODUCTS), "--view", "plain", "--learner", "grpo", "--eval-every", "1",
               "--seed", "1", "--episode-concurrency", "8", "--rollout-batch-size", "4",
               "--over-sampling-batch-size", "8", "--n-samples-per-prompt", "4", "--global-batch-size", "8",
               "--fault-rate", "0.02", "--steps", "3"]
URL = re.compile(r"at (http://\S+/) ")


def make_run(out: Path, catalog_cache: Path, name: str = "real") -> Path:
    build_catalog(PRODUCTS, 0, catalog_cache)
    before = os.environ.get("SHOPSIMRL_CACHE")
    os.environ["SHOPSIMRL_CACHE"] = str(catalog_cache)
    try:
        assert cli.main([*RUN_OPTIONS, "--out", str(out), "--name", name]) == 0
    finally:
        if before is None:
            del os.environ["SHOPSIMRL_CACHE"]
        else:
            os.environ["SHOPSIMRL_CACHE"] = before
    return out / name


@contextmanager
def view_server(folder: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``shopsimrl view FOLDER --port 0``: (its URL, the process); stopped by its PID on exit."""
    process = subprocess.Popen([sys.executable, "-m", "shopsimrl.cli", "view", str(folder), "--port", "0", *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and not URL.search(line):
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                raise RuntimeError(f"shopsimrl view exited: {process.stderr.read() if process.stderr else ''}")
        found = URL.search(line)
        assert found, line
        yield found.group(1), process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=20)
