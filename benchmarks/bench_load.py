"""Load and abuse of a real env server process (``shopsimrl env serve`` on 127.0.0.1).

1. Sessions: ``SESSIONS`` concurrent sessions (reset -> 3 steps -> release) against
   ``--slots 48``, repeated ``REPEATS`` times; counts errors and slots still leased
   afterwards, and the p50/p99 of step latency and of a whole session (slot wait included).
2. Oversized bodies: while clients keep POSTing bodies announced as 200 MB, how fast
   ``/healthz`` answers (p50/p99), against the same probe on an idle server.
3. Idle gaps: 64 episodes x 5 steps, 4.99 s between steps (a model's pace), with the
   defaults (server keep-alive 75 s, client 30 s, retries) and with the settings this
   replaced (both 5 s, no retry): technical failures and leaked slots of each.

``python -m benchmarks.bench_load [--quick]`` writes ``benchmarks/results/load.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from shopsimrl.env.build import build_catalog
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.processes import stop_process
from shopsimrl.io import atomic_write_json

RESULTS = Path(__file__).resolve().parent / "results" / "load.json"
PRODUCTS = 2_000
SLOTS = 48


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class _Server:
    def __init__(self, *extra: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        build_catalog(PRODUCTS, 0)
        self.proc = subprocess.Popen([sys.executable, "-m", "shopsimrl.cli", "env", "serve", "--port", str(self.port),
                                      "--products", str(PRODUCTS), "--slots", str(SLOTS), *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/healthz", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("env server did not start")

    def health(self) -> dict[str, Any]:
        return httpx.get(self.url + "/healthz", timeout=10).json()

    def stop(self) -> None:
        stop_process(self.proc)


async def _sessions(url: str, sessions: int) -> dict[str, Any]:
    errors: list[str] = []
    step_seconds: list[float] = []
    session_seconds: list[float] = []
    # a connection per session: a reset waiting for a slot holds its connection, and the steps of the
    # sessions that hold the slots must not queue behind those waits for a connection
    async with HttpEnvClient(url, slot_timeout=300.0, max_connections=sessions + 64) as client:
        tasks = await client.list_tasks("train")

        async def session(i: int) -> None:
            started = time.perf_counter()
            lease = None
            try:
                lease = (await client.reset(tasks[i % len(tasks)])).lease_id
                for action in ("search[red shoes]", "click[back to search]", "search[blue jacket]"):
                    t = time.perf_counter()
                    await client.step(lease, action)
                    step_seconds.append(time.perf_counter() - t)
            except Exception as exc:  # counted, never hidden
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                await _release(client, lease, errors)
                session_seconds.append(time.perf_counter() - started)

        t0 = time.perf_counter()
        await asyncio.gather(*(session(i) for i in range(sessions)))
        wall = time.perf_counter() - t0
    return {"errors": len(errors), "error_samples": errors[:3], "wall_seconds": wall,
            "step_p50_ms": _percentile(step_seconds, 0.5) * 1e3, "step_p99_ms": _percentile(step_seconds, 0.99) * 1e3,
            "session_p50_s": _percentile(session_seconds, 0.5), "session_p99_s": _percentile(session_seconds, 0.99)}


async def _healthz_probe(url: str, seconds: float, *, abusers: int) -> dict[str, Any]:
    """healthz latency for ``seconds`` while ``abusers`` clients send 200 MB-announced bodies."""
    stop = asyncio.Event()
    refused = 0

    async def abuse() -> None:
        nonlocal refused
        host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 200000000\r\n\r\n" + b"x" * 65536)
                await writer.drain()
                status = await asyncio.wait_for(reader.readline(), 10)
                refused += status.startswith(b"HTTP/1.1 413")
                writer.close()
            except (OSError, asyncio.TimeoutError):
                pass

    latencies: list[float] = []
    workers = [asyncio.create_task(abuse()) for _ in range(abusers)]
    async with httpx.AsyncClient(base_url=url) as probe:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            (await probe.get("/healthz")).raise_for_status()
            latencies.append(time.perf_counter() - t)
            await asyncio.sleep(0.01)
    stop.set()
    await asyncio.gather(*workers, return_exceptions=True)
    return {"healthz_p50_ms": _percentile(latencies, 0.5) * 1e3, "healthz_p99_ms": _percentile(latencies, 0.99) * 1e3,
            "probes": len(latencies), "oversized_bodies_refused_413": refused}


async def _release(client: HttpEnvClient, lease: str | None, errors: list[str]) -> None:
    """Give a session's slot back; a failed release is counted with the session's errors, never hidden."""
    if lease is None:
        return
    try:
        await client.release(lease)
    except Exception as exc:
        errors.append(f"release: {type(exc).__name__}: {exc}")


async def _idle_gaps(url: str, *, episodes: int, pause: float, **client_options: Any) -> dict[str, Any]:
    failures: list[str] = []
    async with HttpEnvClient(url, **client_options) as client:
        tasks = await client.list_tasks("train")

        async def episode(i: int) -> None:
            lease = None
            try:
                lease = (await client.reset(tasks[i % len(tasks)])).lease_id
                for turn in range(5):
                    await asyncio.sleep(pause)
                    await client.step(lease, "search[shoes]" if turn == 0 else "click[back to search]")
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                await _release(client, lease, failures)

        await asyncio.gather(*(episode(i) for i in range(episodes)))
    return {"episodes": episodes, "steps_per_episode": 5, "seconds_between_steps": pause,
            "technical_failures": len(failures), "failure_samples": failures[:2]}


def _idle_gap_runs(episodes: int) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for label, server_args, options in (
        ("defaults_keepalive_75s_client_30s_retries", (), {}),
        ("old_keepalive_5s_client_5s_no_retries", ("--keep-alive", "5"), {"keepalive_expiry": 5.0,
                                                                          "connect_retries": 0}),
    ):
        server = _Server(*server_args)
        try:
            result = asyncio.run(_idle_gaps(server.url, episodes=episodes, pause=4.99, **options))
            result["leaked_slots"] = int(server.health()["leased"])
        finally:
            server.stop()
        print(f"  idle gaps, {label}: {result['technical_failures']} failures, {result['leaked_slots']} leaked",
              flush=True)
        runs[label] = result
    return runs


def main(quick: bool = False) -> dict[str, Any]:
    sessions, repeats = (200, 2) if quick else (1000, 5)
    server = _Server()
    try:
        runs = []
        for r in range(repeats):
            result = asyncio.run(_sessions(server.url, sessions))
            health = server.health()
            result["leaked_slots"] = int(health["leased"])
            runs.append(result)
            print(f"  run {r + 1}/{repeats}: {sessions} sessions, {result['errors']} errors, "
                  f"{result['leaked_slots']} leaked, step p50 {result['step_p50_ms']:.1f} ms "
                  f"p99 {result['step_p99_ms']:.1f} ms, {result['wall_seconds']:.1f} s", flush=True)
        idle = asyncio.run(_healthz_probe(server.url, 3.0 if quick else 10.0, abusers=0))
        abused = asyncio.run(_healthz_probe(server.url, 3.0 if quick else 10.0, abusers=8))
    finally:
        server.stop()
    gaps = _idle_gap_runs(16 if quick else 64)
    results = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "quick": quick,
        "sessions": {"concurrent_sessions": sessions, "slots": SLOTS, "repeats": repeats,
                     "steps_per_session": 3,
                     "errors_total": sum(r["errors"] for r in runs),
                     "leaked_slots_total": sum(r["leaked_slots"] for r in runs),
                     "step_p50_ms_median": sorted(r["step_p50_ms"] for r in runs)[len(runs) // 2],
                     "step_p99_ms_median": sorted(r["step_p99_ms"] for r in runs)[len(runs) // 2],
                     "session_p50_s_median": sorted(r["session_p50_s"] for r in runs)[len(runs) // 2],
                     "session_p99_s_median": sorted(r["session_p99_s"] for r in runs)[len(runs) // 2],
                     "runs": runs},
        "oversized_bodies": {"idle": idle, "under_abuse_8_clients": abused},
        "idle_gaps": gaps,
    }
    atomic_write_json(RESULTS, results)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 sessions x 2, shorter probes")
    print(json.dumps(main(quick=parser.parse_args().quick)["sessions"], indent=2, default=str)[:2000])
