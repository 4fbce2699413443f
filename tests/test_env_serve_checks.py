"""``env serve`` (one process): a port already taken fails at once, before "serving"; a world-readable token
file named by $SHOPSIM_ENV_TOKEN_FILE is warned about like ``--token-file``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def _serve(*args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHOPSIM_ENV_TOKEN")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "env", "serve", *args], capture_output=True,
                          text=True, timeout=120, env={**base, **env})
    return done, time.monotonic() - started


def test_a_busy_port_exits_1_at_once_without_serving(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done, took = _serve("--port", str(port), "--products", "300000", "--cache-dir", str(tmp_path))  # never built
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (f"shopsimrl env serve: cannot listen on 127.0.0.1 port {port}: Address already in "
                                   f"use (stop what holds it, or choose another --port)")
    assert "serving" not in done.stdout and not list(tmp_path.iterdir())
    assert took < 30


def test_a_world_readable_token_file_from_the_environment_is_warned_about(tmp_path: Path) -> None:
    token = tmp_path / "env.token"
    token.write_text("a-token-of-enough-characters-0123\n")
    token.chmod(0o644)
    with socket.socket() as taken:  # the warning comes before the port check: no server needed
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done, _ = _serve("--port", str(taken.getsockname()[1]), SHOPSIM_ENV_TOKEN_FILE=str(token))
    assert f"WARNING: the token file {token} is readable by other users (chmod 600 it)" in done.stderr
    token.chmod(0o600)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done, _ = _serve("--port", str(taken.getsockname()[1]), SHOPSIM_ENV_TOKEN_FILE=str(token))
    assert "WARNING" not in done.stderr and done.returncode == 1
