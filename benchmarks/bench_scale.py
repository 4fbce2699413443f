"""Env servers scaled out: closed-loop steps/s and step p99 with 1, 2 and 4 server processes, side by side.

Run with ``python -m benchmarks.bench_scale [--quick]``; results are printed and written
atomically to ``benchmarks/results/scale.json``.

- scaling: ``shopsimrl env serve --processes N`` (the real supervisor, 127.0.0.1) for N = 1, 2, 4,
  one after the other in this run, each driven by the same load: 64 sessions playing oracle-like
  episodes with no pause between steps (closed loop: the servers' saturation throughput),
  through EnvPool, from two load-generator processes (one asyncio client process would be the
  bottleneck before the servers are).
- 1,000 sessions: four server processes with 250 slots each, 1,000 sessions at once from two
  load-generator processes (each its own EnvPool, so each also sees the other's leases only
  through ``/healthz``), one agent-paced episode per session; counted: errors, and the slots
  still leased on the servers and in the pools afterwards (both must be 0).

Each row also has the servers' own CPU time per step (from /proc): on a shared machine the
steps/s move with whatever else runs, the CPU cost of a step much less, so
``steps_per_s_per_server_core`` is the figure to size servers by.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import platform
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_env import _ms, _pct, _session
from benchmarks.common import command_line, publish
from shopsimrl.env.build import build_catalog
from shopsimrl.env.pool import EnvPool
from shopsimrl.env.processes import stop_process
from shopsimrl.env.store import CatalogStore

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
PRODUCTS = 20_000
SESSIONS = 64
LOAD_PROCESSES = 2
BIG_SESSIONS = 1_000


def _first_free_port_run(n: int) -> int:
    import socket

    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        try:
            for port in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise RuntimeError("no run of free ports")


class Servers:
    """``shopsimrl env serve --processes N`` as a subprocess; stopped by PID with SIGTERM."""

    def __init__(self, processes: int, slots: int, cache_dir: Path) -> None:
        port = _first_free_port_run(processes)
        cmd = [sys.executable, "-m", "shopsimrl.cli", "env", "serve", "--processes", str(processes), "--port",
               str(port), "--slots", str(slots), "--products", str(PRODUCTS), "--cache-dir", str(cache_dir)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.urls: list[str] = []
        self.pids: list[int] = []
        lines: queue.Queue[str] = queue.Queue()  # a reader thread: select() cannot see lines already buffered
        threading.Thread(target=lambda: [lines.put(line) for line in self.proc.stdout or ()], daemon=True).start()
        deadline = time.monotonic() + 180
        while not self.urls:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"env serve --processes {processes} did not start")
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if match := re.search(r"pids ([\d, ]+)\)", line):
                self.pids = [int(p) for p in match.group(1).split(", ")]
            if line.startswith("SHOPSIM_ENV_URL="):
                self.urls = line.strip().split("=", 1)[1].split(",")
            if processes == 1 and line.startswith("ShopSim serving on"):  # one process: no supervisor
                self._wait_healthy(f"http://127.0.0.1:{port}", deadline)
                self.urls, self.pids = [f"http://127.0.0.1:{port}"], [self.proc.pid]

    def _wait_healthy(self, url: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"{url} did not answer /healthz")

    def leased(self) -> int:
        return sum(int(httpx.get(f"{url}/healthz", timeout=5).json()["leased"]) for url in self.urls)

    def stop(self) -> None:
        stop_process(self.proc, timeout=30)
        for pid in self.pids:  # a child the supervisor could not stop
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads), from /proc (Linux)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def _with_server_cpu(row: dict[str, Any], pids: list[int], cpu_before: float) -> dict[str, Any]:
    """What the servers spent per step: a figure other jobs on the machine barely move, unlike steps/s."""
    cpu = _cpu_seconds(pids) - cpu_before
    per_step = cpu / max(1, row["steps"])
    row["server_cpu_s"] = round(cpu, 2)
    row["server_cpu_ms_per_step"] = round(per_step * 1e3, 3)
    row["steps_per_s_per_server_core"] = round(1.0 / per_step, 1) if per_step else None
    return row


async def _load(urls: list[str], tasks: list[str], sessions: int, seconds: float, think: tuple[float, float],
                max_episodes: int, seed: int) -> dict[str, Any]:
    step_lat: list[float] = []
    reset_lat: list[float] = []
    counts = {"episodes": 0, "steps": 0}
    errors: list[str] = []
    async with EnvPool(urls, timeout=120.0) as pool:
        deadline = time.monotonic() + seconds

        async def one(i: int) -> None:
            try:
                await _session(pool, tasks, random.Random(seed * 100_000 + i), deadline, think, step_lat,  # type: ignore[arg-type]
                               reset_lat, counts, max_episodes)
            except Exception as exc:  # counted, never hidden
                errors.append(f"{type(exc).__name__}: {exc}")

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(sessions)))
        elapsed = time.monotonic() - started
        leftover = pool.leases
        per_server = [s["episodes"] for s in pool.status()]
    return {"elapsed": elapsed, "steps": counts["steps"], "episodes": counts["episodes"], "errors": errors,
            "step_lat": step_lat, "reset_lat": reset_lat, "pool_leases_after": leftover, "per_server": per_server}


def _load_process(*args: Any) -> dict[str, Any]:
    return asyncio.run(_load(*args))


def _drive(urls: list[str], tasks: list[str], sessions: int, seconds: float, think: tuple[float, float],
           max_episodes: int) -> dict[str, Any]:
    """``sessions`` split over LOAD_PROCESSES load-generator processes; their figures merged."""
    context = multiprocessing.get_context("spawn")
    share = [sessions // LOAD_PROCESSES + (1 if i < sessions % LOAD_PROCESSES else 0) for i in range(LOAD_PROCESSES)]
    episodes_each = [max(1, max_episodes * s // sessions) for s in share]
    with ProcessPoolExecutor(LOAD_PROCESSES, mp_context=context) as pool:
        parts = list(pool.map(_load_process, *zip(*[(urls, tasks, share[i], seconds, think, episodes_each[i], i)
                                                     for i in range(LOAD_PROCESSES)])))
    step_lat = [x for p in parts for x in p["step_lat"]]
    reset_lat = [x for p in parts for x in p["reset_lat"]]
    elapsed = max(p["elapsed"] for p in parts)
    steps = sum(p["steps"] for p in parts)
    errors = [e for p in parts for e in p["errors"]]
    return {"servers": len(urls), "sessions": sessions, "load_processes": LOAD_PROCESSES, "seconds": round(elapsed, 1),
            "episodes": sum(p["episodes"] for p in parts), "steps": steps, "steps_per_s": round(steps / elapsed, 1),
            "step_p50_ms": _ms(_pct(step_lat, 0.5)), "step_p99_ms": _ms(_pct(step_lat, 0.99)),
            "reset_p99_ms": _ms(_pct(reset_lat, 0.99)), "errors": len(errors), "first_errors": errors[:3],
            "episodes_per_server": [sum(x) for x in zip(*(p["per_server"] for p in parts))],
            "pool_leases_after": sum(p["pool_leases_after"] for p in parts)}


def main(quick: bool = False) -> dict[str, Any]:
    seconds = 6.0 if quick else 20.0
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "quick": quick,
        "date": time.strftime("%Y-%m-%d"),
        "products": PRODUCTS,
    }
    with tempfile.TemporaryDirectory(prefix="shopsim-scale-") as tmp:
        cache_dir = Path(tmp)
        store = CatalogStore(build_catalog(PRODUCTS, 0, cache_dir))
        tasks = store.task_ids("train")
        store.close()
        scaling = []
        for processes in (1, 2, 4):
            servers = Servers(processes, SESSIONS, cache_dir)
            load_before = round(os.getloadavg()[0], 2)  # other jobs on the machine skew the figures: say so
            try:
                cpu_before = _cpu_seconds(servers.pids)
                row = _drive(servers.urls, tasks, SESSIONS, seconds, (0.0, 0.0), max_episodes=1_000_000)
                row = _with_server_cpu(row, servers.pids, cpu_before)
                row["server_leased_after"] = servers.leased()
                row["load_average_1min_before"] = load_before
            finally:
                servers.stop()
            print(f"closed loop, {processes} server process(es):", json.dumps(row), flush=True)
            scaling.append(row)
        base = scaling[0]["steps_per_s"]
        for row in scaling:
            row["speedup_vs_1"] = round(row["steps_per_s"] / base, 2)
        results["closed_loop"] = scaling
        big_sessions = 200 if quick else BIG_SESSIONS
        servers = Servers(4, big_sessions // 4, cache_dir)
        load_before = round(os.getloadavg()[0], 2)
        try:
            cpu_before = _cpu_seconds(servers.pids)
            big = _drive(servers.urls, tasks, big_sessions, 600.0, (0.2, 0.6), max_episodes=big_sessions)
            big = _with_server_cpu(big, servers.pids, cpu_before)
            time.sleep(0.5)
            big["server_leased_after"] = servers.leased()
            big["load_average_1min_before"] = load_before
        finally:
            servers.stop()
        print(f"{big_sessions} sessions over 4 processes:", json.dumps(big), flush=True)
        results["sessions_1000"] = big
    results["checks"] = {
        "1000_sessions_0_errors": results["sessions_1000"]["errors"] == 0,
        "1000_sessions_0_leaked_slots": results["sessions_1000"]["server_leased_after"] == 0
        and results["sessions_1000"]["pool_leases_after"] == 0,
    }
    publish(RESULTS, results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__, "short runs and 200 sessions instead of 1,000")
