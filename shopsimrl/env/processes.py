"""``shopsimrl env serve --processes N``: N env server processes on consecutive ports, one supervisor.

One server process is bound by one core: its searches release the GIL, but the
request handling around them does not.  N processes over the one read-only
catalog file use N cores without threads fighting over the GIL.  The catalog is
built (or found) once, here, before any child starts, so the children only open
it.  The supervisor prints the URLs once every child answers ``/healthz`` and
stops them all, by PID, on Ctrl-C or SIGTERM.  A child that dies later is
reported and the others go on (the multi-server client routes around it); the
supervisor exits when none is left.

A child proves it is ours: each gets a random nonce through its environment
(never its command line) and must report it on ``/healthz``.  Whatever else
answers on a child's port (another program holding it) is never taken for the
child: the start stops at once, exit 1, naming the port, and the token is never
sent there (``/healthz`` is the one open endpoint; no URL is printed).

On Linux every child is started with the parent-death signal SIGKILL, so the
children end with the supervisor however it ends (kill -9 included), even a
child that is stopped or stuck in its own shutdown.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

import httpx

from shopsimrl.env.auth import TOKEN_ENV
from shopsimrl.errors import Interrupted

STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 10.0
POLL_SECONDS = 0.2
INSTANCE_ENV = "SHOPSIM_ENV_INSTANCE"  # a child's nonce, which its /healthz reports


class _Stop(Interrupted):
    """Raised in the supervisor by SIGTERM (SIGINT raises KeyboardInterrupt)."""


@dataclass
class Child:
    port: int
    url: str
    process: subprocess.Popen[bytes]
    nonce: str


def child_command(port: int, serve_args: Sequence[str]) -> list[str]:
    """The command of one child: ``shopsimrl env serve`` with the same options on its own port."""
    return [sys.executable, "-m", "shopsimrl.cli", "env", "serve", *serve_args, "--port", str(port), "--processes", "1"]


def url_host(host: str) -> str:
    """How a client writes the bind address in a URL (0.0.0.0 is reachable on this machine as 127.0.0.1)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def stop_process(process: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """Stop one process by its PID: SIGTERM, then SIGKILL if it has not ended within ``timeout`` s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _wait_or_kill(process, timeout)


def _wait_or_kill(process: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float) -> None:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT)


def _stop_all(children: Sequence[Child]) -> None:
    for child in children:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for child in children:  # one deadline for all: they were signalled together
        _wait_or_kill(child.process, max(0.1, deadline - time.monotonic()))


def _wait_ready(children: Sequence[Child], timeout: float) -> str | None:
    """None once every child answers /healthz; else why not (a child exited, or the timeout)."""
    pending = list(children)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0) as http:
        while pending:
            for child in list(pending):
                code = child.process.poll()
                if code is not None:
                    return (f"the server for port {child.port} exited with code {code} during startup "
                            f"(is the port in use? its message is above)")
                try:
                    response = http.get(f"{child.url}/healthz")
                except httpx.HTTPError:
                    continue
                if response.status_code != 200:
                    continue
                if _instance(response) != child.nonce:
                    return (f"port {child.port} is held by another server (its /healthz answers, but not with "
                            f"this child's nonce): stop it or choose another --port")
                pending.remove(child)
            if pending and time.monotonic() > deadline:
                return f"{', '.join(c.url for c in pending)} did not answer /healthz within {timeout:.0f}s"
            if pending:
                time.sleep(POLL_SECONDS)
    return None


def supervise(host: str, first_port: int, processes: int, serve_args: Sequence[str], token: str | None) -> int:
    """Start ``processes`` children on ``first_port``...; print their URLs; stop them on a signal.

    ``serve_args``: the ``env serve`` options every child repeats (host, slots, catalog, --insecure...);
    the token reaches the children through their environment, never their command line.
    """
    env = dict(os.environ)
    if token is not None:
        env[TOKEN_ENV] = token
    children: list[Child] = []
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    die_with_parent = _death_signal(os.getpid()) if sys.platform.startswith("linux") else None
    try:
        for i in range(processes):
            port = first_port + i
            nonce = secrets.token_hex(16)
            process = subprocess.Popen(child_command(port, serve_args), env={**env, INSTANCE_ENV: nonce},
                                       stdout=subprocess.DEVNULL, preexec_fn=die_with_parent)
            children.append(Child(port, f"http://{url_host(host)}:{port}", process, nonce))
        problem = _wait_ready(children, STARTUP_TIMEOUT)
        if problem is not None:
            print(f"shopsimrl env serve: {problem}; stopping the others", file=sys.stderr, flush=True)
            return 1
        urls = ",".join(c.url for c in children)
        pids = ", ".join(str(c.process.pid) for c in children)
        print(f"ShopSim serving {processes} processes (pids {pids}); Ctrl-C stops them all", flush=True)
        print(f"SHOPSIM_ENV_URL={urls}", flush=True)
        reported: set[int] = set()
        while True:
            for child in children:
                code = child.process.poll()
                if code is not None and child.port not in reported:
                    reported.add(child.port)
                    print(f"shopsimrl env serve: the server at {child.url} (pid {child.process.pid}) exited with "
                          f"code {code}; {processes - len(reported)} still serving", file=sys.stderr, flush=True)
            if len(reported) == processes:
                return 1
            time.sleep(POLL_SECONDS)
    except (KeyboardInterrupt, _Stop):
        print("shopsimrl env serve: stopping every server process", file=sys.stderr, flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the shutdown short
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            _stop_all(children)
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, interrupt)


def _instance(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    instance = body.get("instance") if isinstance(body, dict) else None
    return instance if isinstance(instance, str) else None


PR_SET_PDEATHSIG = 1


def _death_signal(parent: int) -> Callable[[], None]:
    """Linux, in the child before exec: SIGKILL it when the supervisor ends, however it ends (no orphans).

    SIGKILL, not SIGTERM: a child that is stopped, or slow in its own shutdown, must not outlive a
    supervisor killed outright.  A supervisor that already died before the prctl is caught by the
    parent check (the child was re-parented), and the child ends at once.
    """

    def arm() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def _raise_stop(_signum: int, _frame: FrameType | None) -> None:
    raise _Stop()
