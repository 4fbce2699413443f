"""What the GRPO learner costs a rollout step: the main job on the default catalog, side by side.

Target: one step of ``--learner grpo`` adds at most 20 % to the step's wall time of the
faithful ``--learner none``.  Both play the embedded shopper on the same in-process env
(the default 20,000-product catalog) with the default knobs, in alternating runs of a few
steps each (so a busy machine slows both alike); a step's wall time is the time between
two finished steps, so it holds the episodes, the learner's update and saved parameters
and the step's outputs.  Reported: medians and their ratio, the learner's own time per
step (``after_batch``: record lookup, two Adam updates, the saved state), and env steps
per episode (the learned shopper may play longer or shorter episodes than the heuristic).
No evaluation (``--eval-every`` is a separate, opt-in cost).  Reproduce:
``python -m benchmarks.bench_learner``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.common import command_line, machine, publish
from shopsimrl.agent.heuristic import HeuristicPolicy
from shopsimrl.defaults import DEFAULT_CATALOG_SEED, DEFAULT_PRODUCTS
from shopsimrl.env import InProcessEnvClient, load_env
from shopsimrl.learn.learner import GrpoLearner
from shopsimrl.learn.policy import LinearPolicy
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.episode_runner import agent_runner
from shopsimrl.sampling import SamplingKnobs

RESULTS = Path(__file__).resolve().parent / "results" / "learner.json"
TARGET_RATIO = 1.20


async def _one_run(client: Any, task_ids: list[str], out: str, learner: str, rnd: int, steps: int) -> dict[str, Any]:
    policy: Any = LinearPolicy() if learner == "grpo" else HeuristicPolicy()
    config = RolloutConfig(knobs=SamplingKnobs(), steps=steps, seed=rnd, out=Path(out), name=f"{learner}-{rnd}",
                           timeline=False)
    marks = [time.perf_counter()]
    train_seconds: list[float] = []
    after_batch = None
    if learner == "grpo":
        grpo = GrpoLearner(policy, config.out / config.name, config.knobs.global_batch_size)

        async def after_batch(step: int, rows: list[dict[str, Any]]) -> dict[str, float]:
            start = time.perf_counter()
            metrics = await grpo.after_batch(step, rows)
            train_seconds.append(time.perf_counter() - start)
            return metrics

    result = await run_rollout(config, agent_runner(client, policy), task_ids, after_batch=after_batch,
                               on_step=lambda report: marks.append(time.perf_counter()))
    episodes = [ep for r in result.reports for g in r.groups.values() for ep in g.episodes]
    return {"step_seconds": [b - a for a, b in zip(marks, marks[1:])], "train_seconds": train_seconds,
            "env_steps_per_episode": statistics.fmean(ep.env_steps for ep in episodes)}


async def _measure(rounds: int, steps: int, products: int) -> dict[str, dict[str, list[float]]]:
    env = await asyncio.to_thread(load_env, products, DEFAULT_CATALOG_SEED, slots=64)
    client = InProcessEnvClient(env, owns_env=True)
    samples: dict[str, dict[str, list[float]]] = {
        name: {"step_seconds": [], "train_seconds": [], "env_steps_per_episode": []} for name in ("none", "grpo")}
    try:
        task_ids = await client.list_tasks("train")
        with tempfile.TemporaryDirectory(prefix="shopsimrl-bench-learner-") as out:
            for rnd in range(rounds):
                for learner in ("none", "grpo") if rnd % 2 == 0 else ("grpo", "none"):
                    run = await _one_run(client, task_ids, out, learner, rnd, steps)
                    samples[learner]["step_seconds"] += run["step_seconds"]
                    samples[learner]["train_seconds"] += run["train_seconds"]
                    samples[learner]["env_steps_per_episode"].append(run["env_steps_per_episode"])
    finally:
        await client.aclose()
    return samples


def main(quick: bool = False) -> dict[str, object]:
    rounds, steps, products = (2, 2, 2000) if quick else (4, 5, DEFAULT_PRODUCTS)
    samples = asyncio.run(_measure(rounds, steps, products))
    none_s = statistics.median(samples["none"]["step_seconds"])
    grpo_s = statistics.median(samples["grpo"]["step_seconds"])
    summary = {
        "step_seconds_median_none": none_s,
        "step_seconds_median_grpo": grpo_s,
        "ratio_grpo_over_none": grpo_s / none_s,
        "learner_seconds_per_step_median": statistics.median(samples["grpo"]["train_seconds"]),
        "env_steps_per_episode_none": statistics.fmean(samples["none"]["env_steps_per_episode"]),
        "env_steps_per_episode_grpo": statistics.fmean(samples["grpo"]["env_steps_per_episode"]),
        "target_ratio": TARGET_RATIO,
        "met": grpo_s / none_s <= TARGET_RATIO,
    }
    results = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "products": products,
               "rounds": rounds, "steps_per_run": steps, "summary": summary, "samples": samples}
    publish(RESULTS, results, summary)
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
