"""``env serve --processes N`` and ``rollout --env URL1,URL2`` with real processes and real signals."""

from __future__ import annotations

import http.server
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from catalogs import SMALL_PRODUCTS, SMALL_SEED
from local_processes import alive, free_ports

from shopsimrl.env.processes import stop_process

CATALOG = ["--products", str(SMALL_PRODUCTS), "--seed", str(SMALL_SEED)]
pytestmark = pytest.mark.slow  # real server processes, a minute of them: with -n this file starts first


def wait_gone(pids: list[int], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if alive(p)]}"
        time.sleep(0.05)


def _sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Supervisor:
    """``shopsimrl env serve --processes N`` in a subprocess, with the PIDs and URLs it prints."""

    def __init__(self, cache_dir: Path, processes: int, port: int, *extra: str) -> None:
        cmd = [sys.executable, "-m", "shopsimrl.cli", "env", "serve", "--processes", str(processes), "--port",
               str(port), "--slots", "48", "--cache-dir", str(cache_dir), *CATALOG, *extra]
        # its own session: a Ctrl-C is then a SIGINT to its process group, as a terminal sends it; SIGINT at its
        # default, as in a terminal, whatever the test runner inherited (a shell's background job ignores it, and an
        # ignored SIGINT stays ignored across exec: the server would then rightly never see a Ctrl-C)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, preexec_fn=_sigint_as_in_a_terminal)
        self.urls: list[str] = []
        self.pids: list[int] = []
        self.stdout: list[str] = []
        # A reader thread, not select(): a line already in the pipe reader's buffer never wakes select() again.
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self._lines.put(line) for line in self.proc.stdout or ()],
                         daemon=True).start()

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.urls:
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, f"not ready: {self.stdout} {self.stderr_now()}"
            try:
                line = self._lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            self.stdout.append(line)
            if match := re.search(r"pids ([\d, ]+)\)", line):
                self.pids = [int(p) for p in match.group(1).split(", ")]
            if line.startswith("SHOPSIM_ENV_URL="):
                self.urls = line.strip().split("=", 1)[1].split(",")

    def printed(self, timeout: float = 5.0) -> list[str]:
        """Every stdout line of a supervisor that has exited."""
        lines = list(self.stdout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                lines.append(self._lines.get(timeout=0.2))
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
        return lines

    def stderr_now(self) -> str:
        return "" if self.proc.poll() is None or self.proc.stderr is None else self.proc.stderr.read()

    def stop(self) -> None:
        """By PID: the supervisor, then any child it left (never by name)."""
        stop_process(self.proc, timeout=20)
        for pid in self.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture()
def supervisors(catalog_cache: Path, small_catalog: Path) -> Iterator[list[Supervisor]]:
    started: list[Supervisor] = []
    try:
        yield started
    finally:
        for sup in started:
            sup.stop()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "Ctrl-C"])
def test_processes_serve_on_consecutive_ports_and_stop_together(supervisors: list[Supervisor], catalog_cache: Path,
                                                                how: str) -> None:
    port = free_ports(3)
    sup = Supervisor(catalog_cache, 3, port)
    supervisors.append(sup)
    sup.wait_ready()
    assert sup.urls == [f"http://127.0.0.1:{port + i}" for i in range(3)]
    assert len(sup.pids) == 3 and sup.proc.pid not in sup.pids
    fingerprints = set()
    for url in sup.urls:
        body = httpx.get(f"{url}/healthz", timeout=5).json()
        assert body["slots"] == 48
        fingerprints.add(body["fingerprint"]["id"])
    assert len(fingerprints) == 1  # one catalog for all
    if how == "Ctrl-C":  # the whole process group: the supervisor and every server at once
        os.killpg(sup.proc.pid, signal.SIGINT)
    else:
        sup.proc.send_signal(getattr(signal, how))
    assert sup.proc.wait(timeout=30) == 0
    wait_gone(sup.pids)
    assert "stopping every server process" in sup.proc.stderr.read()  # type: ignore[union-attr]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_children_do_not_outlive_a_killed_supervisor(supervisors: list[Supervisor], catalog_cache: Path) -> None:
    sup = Supervisor(catalog_cache, 2, free_ports(2))
    supervisors.append(sup)
    sup.wait_ready()
    sup.proc.kill()  # SIGKILL: the supervisor cannot stop anything itself
    sup.proc.wait(timeout=10)
    wait_gone(sup.pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_stopped_child_does_not_outlive_a_killed_supervisor(supervisors: list[Supervisor],
                                                              catalog_cache: Path) -> None:
    """SIGSTOP holds back SIGTERM, not SIGKILL: the parent-death signal must be SIGKILL."""
    sup = Supervisor(catalog_cache, 2, free_ports(2))
    supervisors.append(sup)
    sup.wait_ready()
    os.kill(sup.pids[0], signal.SIGSTOP)  # stuck: it can act on no signal but SIGKILL
    sup.proc.kill()
    sup.proc.wait(timeout=10)
    wait_gone(sup.pids, timeout=10)


def test_a_port_in_use_stops_the_others(supervisors: list[Supervisor], catalog_cache: Path) -> None:
    port = free_ports(2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port + 1))
        squatter.listen()
        sup = Supervisor(catalog_cache, 2, port)
        supervisors.append(sup)
        assert sup.proc.wait(timeout=120) == 1
    stderr = sup.proc.stderr.read()  # type: ignore[union-attr]
    assert f"port {port + 1} exited" in stderr and "stopping the others" in stderr
    with socket.socket() as again:  # the first child is gone: its port is free again
        again.bind(("127.0.0.1", port))


class _Foreign(http.server.BaseHTTPRequestHandler):
    """Another program's HTTP server: 200 JSON to everything, as any health endpoint would."""

    def do_GET(self) -> None:  # noqa: N802  (the stdlib's name)
        body = b'{"ready": true, "slots": 48, "leased": 0}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_foreign_server_on_a_port_is_never_taken_for_a_child(supervisors: list[Supervisor],
                                                                catalog_cache: Path) -> None:
    port = free_ports(2)
    foreign = http.server.ThreadingHTTPServer(("127.0.0.1", port + 1), _Foreign)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        sup = Supervisor(catalog_cache, 2, port)
        supervisors.append(sup)
        started = time.monotonic()
        assert sup.proc.wait(timeout=60) == 1
        assert time.monotonic() - started < 30  # at once, not after the startup timeout
    finally:
        foreign.shutdown()
        foreign.server_close()
    stderr = sup.proc.stderr.read()  # type: ignore[union-attr]
    assert "SHOPSIM_ENV_URL" not in "".join(sup.printed())  # the foreign URL was never handed out
    assert f"port {port + 1} is held by another server" in stderr and "stopping the others" in stderr
    assert "Traceback" not in stderr
    with socket.socket() as again:  # the first child is gone: its port is free again
        again.bind(("127.0.0.1", port))


def test_a_busy_port_exits_1_at_once_without_claiming_to_serve(small_catalog: Path, catalog_cache: Path) -> None:
    port = free_ports(1)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "env", "serve", "--port", str(port),
                               "--cache-dir", str(catalog_cache), *CATALOG], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 20
    assert "serving" not in done.stdout and f"port {port}" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_serve_refuses_bad_process_counts(catalog_cache: Path) -> None:
    for args, fragment in ((["--processes", "0"], "argument --processes: must be a whole number within 1..256"),
                           (["--processes", "4", "--port", "65534"], "needs the ports")):
        done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "env", "serve", *args], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2 and fragment in done.stderr


def _counters(url: str) -> dict[str, int]:
    return httpx.get(f"{url}/counters", timeout=5).json()


def test_rollout_over_two_servers_survives_one_killed_mid_step(supervisors: list[Supervisor], catalog_cache: Path,
                                                                tmp_path: Path) -> None:
    sup = Supervisor(catalog_cache, 2, free_ports(2))
    supervisors.append(sup)
    sup.wait_ready()
    survivor, victim = sup.urls
    victim_pid = sup.pids[1]
    cmd = [sys.executable, "-m", "shopsimrl.cli", "rollout", "--env", ",".join(sup.urls), "--steps", "8",
           "--rollout-batch-size", "4", "--n-samples-per-prompt", "4", "--over-sampling-batch-size", "8",
           "--global-batch-size", "8", "--episode-concurrency", "32", "--max-consecutive-failed-groups", "1000",
           "--view", "plain", "--out", str(tmp_path), "--name", "two"]
    rollout = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _counters(victim)["steps"] < 40:  # both servers are busy: kill one in the middle of the run
            assert rollout.poll() is None, rollout.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(victim_pid, signal.SIGKILL)
        assert rollout.poll() is None  # killed while the run was going on
        out, err = rollout.communicate(timeout=300)
    finally:
        if rollout.poll() is None:
            rollout.kill()
            rollout.wait(timeout=10)
    assert rollout.returncode == 0, err
    run = tmp_path / "two"
    assert (run / "step-8" / "metrics.json").is_file()  # the run went on to its last step
    siblings = [s for path in run.glob("step-*/triage/*.json") for s in json.loads(path.read_text())["siblings"]]
    technical = [s for s in siblings if not s["scored"]]
    assert technical, "no episode failed: the kill did not land mid-step"
    for sibling in technical:  # every technical episode is one of the killed server's
        assert sibling["error"]["type"] == "EnvUnavailableError", sibling["error"]
    assert sum(s["scored"] for s in siblings) > len(technical)
    assert _counters(survivor)["leased"] == 0  # the survivor holds no slot of the finished run
    assert not alive(victim_pid) and sup.proc.poll() is None  # the supervisor keeps serving with the rest
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.proc.wait(timeout=30) == 0
    assert f"{victim} (pid {victim_pid}) exited" in sup.proc.stderr.read()  # type: ignore[union-attr]
    wait_gone(sup.pids)


def test_stop_process_terminates_and_kills_what_ignores_sigterm():
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True)\n"
                                 "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
        stop_process(polite, timeout=10)
        assert polite.returncode == -signal.SIGTERM
        started = time.monotonic()
        stop_process(stubborn, timeout=0.5)
        assert stubborn.returncode == -signal.SIGKILL and time.monotonic() - started < 10
        stop_process(stubborn)  # already ended: nothing to do
    finally:
        for proc in (polite, stubborn):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
