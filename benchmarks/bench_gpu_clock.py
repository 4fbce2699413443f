"""The modelled GPU clock against the release run: the seed order with fixed waves, step by step.

Three stages, on the main job (in-process ShopSim, the default catalog, the heuristic policy, seed
order, fixed waves, 80 steps like the release):

1. play the run on the modelled clock and record every episode's seed, turns and pages;
2. fit the time model's reply tokens per action, verbosity spread and capacity to the release's
   per-step ``rollout_time_s`` (``shopsimrl.simulate.clock_fit``: median and 10th-90th percentiles);
3. run the main job again on the fitted clock and check its modelled step times against the release
   (median within 10%, 10th-90th percentile range within 20%), with the mean response tokens per
   episode that scale the training time (``gputime.CALIBRATION_TOKENS_PER_EPISODE``).

``python -m benchmarks.bench_gpu_clock`` writes ``benchmarks/results/gpu_clock.json``; ``--check`` runs
stage 3 alone with the package's constants (keeping the fit already in the result file; what
tests/simulate/test_gpu_clock.py checks on fewer steps).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean
from typing import Any

from benchmarks.common import machine, publish
from shopsimrl.agent import make_policy
from shopsimrl.defaults import DEFAULT_CATALOG_SEED, DEFAULT_PRODUCTS
from shopsimrl.env import InProcessEnvClient, ShopSimEnv
from shopsimrl.env.build import build_catalog_async
from shopsimrl.io import atomic_write_json
from shopsimrl.rollout.episode_runner import agent_runner
from shopsimrl.rollout.gputime import Clock, TimeModel
from shopsimrl.rollout.group import EpisodeMeter, EpisodeSpec
from shopsimrl.rollout.run import RolloutConfig, run_rollout
from shopsimrl.simulate.clock_fit import FIT_GRID, Played, Spread, check, fit, release_step_times, wave_times

RELEASE_CSV = Path(__file__).resolve().parent.parent / "tests" / "data" / "shopsimrl_release_steps.csv"
STEPS = 80


async def modelled_run(model: TimeModel, steps: int, products: int = DEFAULT_PRODUCTS,
                       seed: int = 0) -> tuple[list[float], list[list[Played]]]:
    """The main job on the modelled clock: each step's modelled seconds, and each step's episodes."""
    path = await build_catalog_async(products, DEFAULT_CATALOG_SEED)
    env = InProcessEnvClient(ShopSimEnv(path, slots=64), owns_env=True)
    played: dict[int, list[Played]] = {}
    inner = agent_runner(env, make_policy("heuristic"))

    async def runner(spec: EpisodeSpec, meter: EpisodeMeter) -> Any:
        result = await inner(spec, meter)
        step = int(spec.rollout_id.split("-")[0][1:])
        played.setdefault(step, []).append(Played(spec.group_index, result.reward if result.scored else None,
                                                   spec.seed, result.turns, tuple(meter.page_chars),
                                                   result.completion_tokens))
        return result

    try:
        with tempfile.TemporaryDirectory(prefix="shopsimrl-bench-gpu-clock-") as tmp:
            config = RolloutConfig(steps=steps, seed=seed, out=Path(tmp), name="clock", clock=Clock.MODELLED,
                                   time_model=model)
            result = await run_rollout(config, runner, await env.list_tasks("train"), keep_reports=False)
    finally:
        await env.aclose()
    return [float(row["wall_seconds"]) for row in result.rows], [played[k] for k in sorted(played)]


def recorded(model: TimeModel, steps: int, cache: Path | None) -> list[list[Played]]:
    """Stage 1's episodes (read from ``cache`` when it holds them; written there after a run)."""
    if cache is not None and cache.exists():
        return [[Played(**{**p, "page_chars": tuple(p["page_chars"])}) for p in step]
                for step in json.loads(cache.read_text())]
    _times, episodes = asyncio.run(modelled_run(model, steps))
    if cache is not None:
        atomic_write_json(cache, [[asdict(p) for p in step] for step in episodes])
    return episodes


def main(steps: int = STEPS, *, check_only: bool = False, out: str = "benchmarks/results/gpu_clock.json",
         cache: Path | None = None) -> dict:
    release = release_step_times(RELEASE_CSV)
    results: dict[str, Any] = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                               "run": {"steps": steps, "catalog": DEFAULT_PRODUCTS, "policy": "heuristic",
                                       "selection": "seed", "waves": "fixed", "seed": 0},
                               "release": Spread.of(release).as_dict()}
    model = TimeModel()
    if check_only and Path(out).exists():  # the fit that chose the package's constants stays on record
        results["fit"] = json.loads(Path(out).read_text()).get("fit")
    if not check_only:
        episodes = recorded(model, steps, cache)
        model, rows = fit(episodes, release, model)
        results["fit"] = {"grid": {k: list(v) for k, v in FIT_GRID.items()}, "best": model.as_dict(),
                          "best_waves": Spread.of(wave_times(episodes, model)).as_dict(),
                          "rows": sorted(rows, key=lambda r: r["loss"])[:20]}  # type: ignore[arg-type, return-value]
    times, episodes = asyncio.run(modelled_run(model, steps))
    tokens = [model.episode(p.seed, p.turns, p.page_chars, p.completion_tokens).tokens for s in episodes for p in s]
    turns = [p.turns for s in episodes for p in s]
    results["model"] = model.as_dict()
    results["main_job"] = {**check(times, release), "step_times_s": [round(t, 3) for t in times],
                           "mean_tokens_per_episode": round(fmean(tokens), 1), "mean_turns": round(fmean(turns), 3),
                           "episodes": len(tokens)}
    publish(out, results, {k: v for k, v in results.items() if k not in ("fit",)} | {
        "main_job": {k: v for k, v in results["main_job"].items() if k != "step_times_s"}})
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--check", action="store_true",
                        help="only stage 3, with the package's constants (the fit in --out is kept)")
    parser.add_argument("--out", default="benchmarks/results/gpu_clock.json")
    parser.add_argument("--episodes", type=Path, default=None, help="stage 1's episodes: read if there, else saved")
    a = parser.parse_args()
    main(a.steps, check_only=a.check, out=a.out, cache=a.episodes)
