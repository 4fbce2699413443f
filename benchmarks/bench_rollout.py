"""Speed of the rollout layer: a full step on ShopSim (in-process and over HTTP), the driver's own
overhead, and its O(1) completion path against a naive ``asyncio.wait`` loop.

Targets (2-core machine): the completion path >= 10x faster than ``asyncio.wait`` over the
pending set with 4,096 groups in flight; driver overhead a small share of a real step.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import command_line, machine, publish
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.completions import CompletionQueue
from shopsimrl.rollout.synthetic import synthetic_runner
from shopsimrl.sampling import SamplingKnobs, TooManyTechnicalFailures

RESULTS = Path(__file__).resolve().parent / "results" / "rollout.json"
IN_FLIGHT = 4096
TARGET_SPEEDUP = 10.0


# -- completion path -------------------------------------------------------------------------------
async def _completion_run(n: int, *, naive: bool, seed: int) -> dict[str, float]:
    """``n`` fake groups (tasks awaiting futures) resolved one per loop iteration in random order."""
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[int]] = [loop.create_future() for _ in range(n)]

    async def group(f: asyncio.Future[int]) -> int:
        return await f

    tasks = [asyncio.create_task(group(f)) for f in futures]
    await asyncio.sleep(0)  # every group is now waiting
    order = list(range(n))
    random.Random(seed).shuffle(order)

    async def resolve() -> None:
        for i in order:
            futures[i].set_result(i)
            await asyncio.sleep(0)

    received = batches = 0
    start = time.perf_counter()
    resolver = asyncio.create_task(resolve())
    if naive:
        pending: set[asyncio.Task[int]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            received += len(done)
            batches += 1
    else:
        queue: CompletionQueue[int, int] = CompletionQueue()
        for i, task in enumerate(tasks):
            queue.add(i, task)
        while received < n:
            received += len(await queue.next_batch())
            batches += 1
    seconds = time.perf_counter() - start
    await resolver
    return {"groups": n, "batches": batches, "seconds": seconds, "us_per_group": seconds / n * 1e6}


def bench_completion(n: int = IN_FLIGHT, repeats: int = 3) -> dict[str, Any]:
    """Median of ``repeats`` runs of each completion path."""
    driver = [asyncio.run(_completion_run(n, naive=False, seed=r)) for r in range(repeats)]
    naive = [asyncio.run(_completion_run(n, naive=True, seed=r)) for r in range(repeats)]
    d = statistics.median(x["seconds"] for x in driver)
    w = statistics.median(x["seconds"] for x in naive)
    return {
        "in_flight": n,
        "driver_seconds": d,
        "naive_asyncio_wait_seconds": w,
        "driver_us_per_group": d / n * 1e6,
        "naive_us_per_group": w / n * 1e6,
        "speedup": w / d,
        "target_speedup": TARGET_SPEEDUP,
        "meets_target": w / d >= TARGET_SPEEDUP,
    }


# -- whole steps ---------------------------------------------------------------------------------
def _step_figures(result: Any, wall: float) -> dict[str, float]:
    reports = result.reports
    completed = sum(len(r.completed) for r in reports)
    n = reports[0].knobs.n_samples_per_prompt
    step_seconds = [r.wall_seconds for r in reports]
    return {
        "steps": len(reports),
        "wall_seconds": wall,
        "step_seconds_mean": statistics.fmean(step_seconds),
        "groups_completed": completed,
        "episodes_completed": completed * n,
        "groups_per_second": completed / sum(step_seconds),
        "episodes_per_second": completed * n / sum(step_seconds),
        "waves": sum(r.waves for r in reports),
    }


def bench_zero_cost_steps(steps: int, knobs: SamplingKnobs) -> dict[str, float]:
    """Steps whose episodes cost nothing: what remains is the driver (tasks, triage, outputs, metrics)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = RolloutConfig(knobs=knobs, steps=steps, out=Path(tmp), name="zero-cost")
        start = time.perf_counter()
        result = asyncio.run(run_rollout(config, synthetic_runner(delay=0.0), [f"t{i}" for i in range(1000)]))
        figures = _step_figures(result, time.perf_counter() - start)
    figures["driver_ms_per_group"] = sum(r.wall_seconds for r in result.reports) / figures["groups_completed"] * 1e3
    return figures


async def _env_steps(client: Any, steps: int, knobs: SamplingKnobs, concurrency: int) -> tuple[Any, float]:
    from shopsimrl.agent import make_policy
    from shopsimrl.rollout.episode_runner import agent_runner

    with tempfile.TemporaryDirectory() as tmp:
        config = RolloutConfig(knobs=knobs, steps=steps, out=Path(tmp), name="bench", episode_concurrency=concurrency)
        tasks = await client.list_tasks("train")
        start = time.perf_counter()
        result = await run_rollout(config, agent_runner(client, make_policy("heuristic")), tasks)
        return result, time.perf_counter() - start


def bench_env_steps(products: int, steps: int, knobs: SamplingKnobs, concurrency: int) -> dict[str, Any]:
    """Full steps with the heuristic agent on the in-process env, then through the HTTP env server."""
    from shopsimrl.env import HttpEnvClient, InProcessEnvClient, load_env
    from shopsimrl.env.server import ServerThread

    env = load_env(products, 0, slots=concurrency)
    try:
        async def in_process() -> tuple[Any, float]:
            client = InProcessEnvClient(env)
            try:
                return await _env_steps(client, steps, knobs, concurrency)
            finally:
                await client.aclose()

        local, local_wall = asyncio.run(in_process())
        with ServerThread(env) as server:
            async def over_http() -> tuple[Any, float]:
                client = HttpEnvClient(server.url)
                try:
                    return await _env_steps(client, steps, knobs, concurrency)
                finally:
                    await client.aclose()

            try:
                remote, remote_wall = asyncio.run(over_http())
                http: dict[str, Any] = _step_figures(remote, remote_wall)
            except TooManyTechnicalFailures as exc:  # an overloaded machine: report it, keep the other figures
                http = {"error": str(exc), "env_counters": env.counters()}
    finally:
        env.close()
    return {
        "products": products,
        "episode_concurrency": concurrency,
        "in_process": _step_figures(local, local_wall),
        "http": http,
    }


def main(quick: bool = False) -> dict[str, Any]:
    knobs = SamplingKnobs()
    steps = 1 if quick else 3
    zero = bench_zero_cost_steps(steps, knobs)
    env_steps = bench_env_steps(2_000 if quick else 20_000, steps, knobs, concurrency=64)
    real = env_steps["in_process"]
    driver_seconds = zero["driver_ms_per_group"] / 1e3 * real["groups_completed"]
    results: dict[str, Any] = {
        "machine": machine(),
        "knobs": knobs.as_dict(),
        "completion_path": bench_completion(IN_FLIGHT, repeats=1 if quick else 3),
        "zero_cost_steps": zero,
        "env_steps": env_steps,
        # the zero-cost driver time for as many groups as the real steps completed, over the real step time
        "driver_overhead_share": driver_seconds / (real["step_seconds_mean"] * real["steps"]),
    }
    publish(RESULTS, results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__, "smaller sizes, for CI")
