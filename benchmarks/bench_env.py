"""ShopSim performance: catalog build time, search latency, env steps through the HTTP server.

Run with ``python -m benchmarks.bench_env [--quick]``; results are printed and
written atomically to ``benchmarks/results/env.json``.

- build: fresh builds (products + FTS index + verified tasks) at 20k and 200k products.
- search: SearchEngine.search latency over a few thousand distinct realistic
  queries (each one a cache miss), p50/p99, at 20k (and 200k for reference).
- http: the env server in a subprocess (uvicorn, 127.0.0.1), 64 concurrent
  sessions through HttpEnvClient playing oracle-like episodes, bounded in time.
  Two loads: closed loop (no pause between steps: the server's saturation
  throughput) and agent-paced (each session pauses as an LLM would between
  turns), which is the rollout workload the latency target is about.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import command_line, publish
from shopsimrl.env.build import build_catalog
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.processes import stop_process
from shopsimrl.env.search import SearchEngine
from shopsimrl.env.store import CatalogStore
from shopsimrl.env.text import normalize_query

RESULTS = Path(__file__).resolve().parent / "results" / "env.json"
SESSIONS = 64


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


# -- build -----------------------------------------------------------------------------------
def bench_build(products: int, cache_dir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    path = build_catalog(products, 0, cache_dir, force=True)
    seconds = time.perf_counter() - started
    return {"products": products, "seconds": round(seconds, 2), "db_mb": round(path.stat().st_size / 1e6, 1)}


# -- search ----------------------------------------------------------------------------------
def realistic_queries(store: CatalogStore, limit: int, seed: int = 0) -> list[str]:
    """Distinct queries an agent would type: the instruction itself and shorter keyword mixes."""
    rng = random.Random(seed)
    out: dict[str, str] = {}
    tasks = [store.task(t) for split in ("train", "val", "test") for t in store.task_ids(split)]
    rng.shuffle(tasks)
    for task in tasks:
        goal = task.goal
        attrs, kind, options = goal["attributes"], goal["kind"], list(goal["options"].values())
        candidates = [
            task.instruction,
            f"{' '.join(attrs)} {kind}",
            f"{kind} {' '.join(options)}",
            f"{rng.choice(attrs)} {kind} {' '.join(options[:1])}",
            f"{kind} {goal['budget']['text']}",
        ]
        for query in candidates:
            out.setdefault(normalize_query(query), query)
        if len(out) >= limit:
            break
    return list(out.values())[:limit]


def bench_search(path: Path, n_queries: int) -> dict[str, Any]:
    store = CatalogStore(path)
    engine = SearchEngine(store.connection, cache_size=n_queries + 10)
    queries = realistic_queries(store, n_queries)
    for query in queries[:50]:  # warm the page cache, not the hit cache
        engine.search(query + " warmup")
    latencies = []
    hits_before = engine.cache_hits
    for query in queries:
        t0 = time.perf_counter()
        engine.search(query)
        latencies.append(time.perf_counter() - t0)
    cold = engine.cache_hits == hits_before
    t0 = time.perf_counter()
    for query in queries[:500]:
        engine.search(query)
    cached = (time.perf_counter() - t0) / min(500, len(queries))
    store.close()
    return {"products": store.product_count, "queries": len(queries), "cold_cache": cold,
            "p50_ms": _ms(_pct(latencies, 0.5)), "p99_ms": _ms(_pct(latencies, 0.99)),
            "mean_ms": _ms(statistics.fmean(latencies)), "cached_hit_mean_ms": _ms(cached)}


# -- HTTP ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(products: int, cache_dir: Path, slots: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "shopsimrl.cli", "env", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--slots", str(slots), "--products", str(products), "--cache-dir", str(cache_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    import httpx

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become healthy")


async def _session(client: HttpEnvClient, tasks: list[str], rng: random.Random, deadline: float,
                   think: tuple[float, float], step_lat: list[float], reset_lat: list[float],
                   counts: dict[str, int], max_episodes: int) -> None:
    """Oracle-like episodes: search the instruction, open the goal (or the first hit), pick options, buy."""
    while time.monotonic() < deadline and counts["episodes"] < max_episodes:
        counts["episodes"] += 1
        t0 = time.perf_counter()
        start = await client.reset(rng.choice(tasks))
        reset_lat.append(time.perf_counter() - t0)
        goal = start.task.goal
        try:
            action = f"search[{start.task.instruction}]"
            for _ in range(30):
                if think[1] > 0:
                    await asyncio.sleep(rng.uniform(*think))
                t0 = time.perf_counter()
                result = await client.step(start.lease_id, action)
                step_lat.append(time.perf_counter() - t0)
                counts["steps"] += 1
                if result.done or time.monotonic() >= deadline:
                    break
                state = result.observation.state
                if state["page"] == "results":
                    ids = [p["product_id"] for p in state["products"]]
                    if goal["product_id"] in ids or "next >" not in state["clickables"]:
                        action = f"click[{goal['product_id'] if goal['product_id'] in ids else ids[0]}]"
                    else:
                        action = "click[next >]"
                else:
                    missing = state.get("missing_axes") or []
                    if missing:
                        axis = missing[0]
                        value = goal["options"].get(axis, state["product"]["options"][axis][0])
                        action = f"click[{axis}={value}]"
                    else:
                        action = "click[buy now]"
        finally:
            await client.release(start.lease_id)


async def _drive(url: str, tasks: list[str], seconds: float, think: tuple[float, float],
                 max_episodes: int) -> dict[str, Any]:
    step_lat: list[float] = []
    reset_lat: list[float] = []
    counts = {"episodes": 0, "steps": 0}
    client = HttpEnvClient(url, timeout=60)
    clients = [client] * SESSIONS
    started = time.monotonic()
    deadline = started + seconds
    await asyncio.gather(*(
        _session(clients[i], tasks, random.Random(i), deadline, think, step_lat, reset_lat, counts, max_episodes)
        for i in range(SESSIONS)))
    elapsed = time.monotonic() - started
    await client.aclose()
    return {"sessions": SESSIONS, "seconds": round(elapsed, 1), "episodes": counts["episodes"],
            "steps": counts["steps"], "steps_per_s": round(counts["steps"] / elapsed, 1),
            "think_s": list(think), "step_p50_ms": _ms(_pct(step_lat, 0.5)), "step_p99_ms": _ms(_pct(step_lat, 0.99)),
            "reset_p50_ms": _ms(_pct(reset_lat, 0.5)), "reset_p99_ms": _ms(_pct(reset_lat, 0.99))}


def bench_http(products: int, cache_dir: Path, seconds: float) -> dict[str, Any]:
    proc, url = _start_server(products, cache_dir, SESSIONS)
    try:
        store = CatalogStore(build_catalog(products, 0, cache_dir))
        tasks = store.task_ids("train")
        store.close()
        closed = asyncio.run(_drive(url, tasks, seconds, (0.0, 0.0), max_episodes=5_000))
        paced = asyncio.run(_drive(url, tasks, seconds, (0.2, 0.6), max_episodes=5_000))
    finally:
        stop_process(proc)
    return {"closed_loop": closed, "agent_paced": paced}


def main(quick: bool = False) -> dict[str, Any]:
    sizes = (2_000, 20_000) if quick else (20_000, 200_000)
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "quick": quick,
        "date": time.strftime("%Y-%m-%d"),
    }
    with tempfile.TemporaryDirectory(prefix="shopsim-bench-") as tmp:
        cache_dir = Path(tmp)
        results["build"] = [bench_build(n, cache_dir) for n in sizes]
        print("build:", json.dumps(results["build"]), flush=True)
        n_queries = 1_000 if quick else 4_000
        results["search"] = [bench_search(build_catalog(n, 0, cache_dir), n_queries) for n in sizes]
        print("search:", json.dumps(results["search"]), flush=True)
        results["http"] = bench_http(sizes[0] if quick else 20_000, cache_dir, 6.0 if quick else 30.0)
        print("http:", json.dumps(results["http"]), flush=True)
    search20k = next(s for s in results["search"] if s["products"] == 20_000)
    results["targets"] = {
        "search_p50_ms_at_20k<=5": search20k["p50_ms"] <= 5.0,
        "step_p99_ms_at_64_sessions<=20 (agent-paced)": results["http"]["agent_paced"]["step_p99_ms"] <= 20.0,
    }
    publish(RESULTS, results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__, "small sizes and short runs")
