"""Real processes on 127.0.0.1: an env server (``shopsimrl env serve``) and rollouts (``paced_rollout.py``).

Every process is stopped by its PID (conftest's fixtures do it in a ``finally``); every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from local_processes import free_port

PRODUCTS = 2_000
HERE = Path(__file__).resolve().parent
ROLLOUT_ARGS = ["--products", str(PRODUCTS), "--rollout-batch-size", "4", "--n-samples-per-prompt", "4",
                "--over-sampling-batch-size", "8", "--global-batch-size", "8", "--view", "plain"]


def wait_for(predicate, timeout: float, what: str, every: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process we started, by its PID: CONT (it may be stopped), TERM, then KILL."""
    if proc.poll() is None:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class EnvServer:
    """``shopsimrl env serve`` in its own process."""

    def __init__(self, cache: Path, *extra: str, port: int | None = None) -> None:
        self.cache = cache
        self.extra = extra
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EnvServer:
        env = {**os.environ, "SHOPSIMRL_CACHE": str(self.cache)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shopsimrl.cli", "env", "serve", "--port", str(self.port), "--products",
             str(PRODUCTS), *self.extra], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(lambda: self.health() is not None or self.proc.poll() is not None, 60, "the env server")
        assert self.proc.poll() is None, self.proc.stderr.read().decode() if self.proc.stderr else ""
        return self

    def health(self) -> dict | None:
        try:
            return httpx.get(self.url + "/healthz", timeout=2).json()
        except httpx.HTTPError:
            return None

    def leased(self) -> int:
        health = self.health()
        assert health is not None, "the env server does not answer"
        return int(health["leased"])

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


class Rollout:
    """``shopsimrl rollout`` (through paced_rollout.py) in its own process."""

    def __init__(self, out: Path, name: str, *args: str, turn_seconds: float = 0.0, cache: Path | None = None):
        self.root = out / name
        env = {**os.environ, "SHOPSIMRL_TURN_SECONDS": str(turn_seconds)}
        if cache is not None:
            env["SHOPSIMRL_CACHE"] = str(cache)
        self.proc = subprocess.Popen([sys.executable, str(HERE / "paced_rollout.py"), *ROLLOUT_ARGS, "--out",
                                      str(out), "--name", name, *args],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.stdout = ""
        self.stderr = ""

    def wait(self, timeout: float) -> int:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        finally:
            stop(self.proc)
        self.stdout, self.stderr = out.decode(), err.decode()
        return int(self.proc.returncode)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        stop(self.proc)

    def step_dirs(self) -> list[Path]:
        return sorted(self.root.glob("step-*"), key=lambda p: int(p.name[5:]))

    def mid_step(self) -> Path | None:
        """The running step's folder once it holds at least one finished trace (work under way)."""
        steps = self.step_dirs()
        if steps and not (steps[-1] / "metrics.json").exists() and any((steps[-1] / "traces").glob("*.json")):
            return steps[-1]
        return None



def check_files_whole(root: Path) -> None:
    """Every file of a run parses (JSON / JSONL), and no temporary file is left."""
    leftovers = [p for p in root.rglob("*.tmp")]
    assert not leftovers, f"temporary files left: {leftovers[:3]}"
    for path in root.rglob("*.json"):
        json.loads(path.read_text(encoding="utf-8"))
    for path in root.rglob("*.jsonl"):
        text = path.read_text(encoding="utf-8")
        assert not text or text.endswith("\n"), f"{path} ends with a torn line"
        for line in text.splitlines():
            json.loads(line)
