"""Measuring a policy the way the dynamic-sampling filter will see it: groups of sibling episodes.

Used to tune the heuristic, by its tests, and to produce the numbers in docs/agent.md
(``python -m shopsimrl.agent.measure``).  A group's type follows the filter's view
of rewards (docs/dynamic-sampling.md §2): ``varied`` when the siblings' rewards spread by more than
1e-6, else ``all_success`` / ``all_fail`` / ``same_partial`` by the common reward.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shopsimrl.agent.episode import DEFAULT_MAX_STEPS, EpisodeResult, run_episode
from shopsimrl.agent.policy import Policy
from shopsimrl.env.types import EnvClient
from shopsimrl.sampling import Verdict, group_verdict

GROUP_TYPES = ("varied", "all_success", "all_fail", "same_partial", "technical")


def group_type(results: Sequence[EpisodeResult]) -> str:
    """The filter's verdict (``sampling.group_verdict``), with zero-std groups split by their common reward."""
    verdict = group_verdict(
        [{"index": i, "reward": r.reward, "metadata": {"shopsim_scored": r.scored}} for i, r in enumerate(results)]
    )
    if verdict is not Verdict.ZERO_STD:
        return verdict.value  # "technical" | "varied"
    if all(r.success == 1.0 for r in results):
        return "all_success"
    return "all_fail" if not results[0].reward else "same_partial"


@dataclass(frozen=True)
class Measurement:
    episodes: int
    success_rate: float
    reward_mean: float
    group_types: dict[str, int]
    per_task_success: dict[str, float]
    end_reasons: dict[str, int]
    mean_turns: float
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "success_rate": round(self.success_rate, 4),
            "reward_mean": round(self.reward_mean, 4),
            "group_types": self.group_types,
            "end_reasons": self.end_reasons,
            "mean_turns": round(self.mean_turns, 2),
            "seconds": round(self.seconds, 2),
            "task_success_histogram": _histogram(self.per_task_success.values()),
        }


def _histogram(rates: Any) -> dict[str, int]:
    """How many tasks had 0/8, 1/8 ... 8/8 successes (keys are the success share)."""
    counts = Counter(f"{rate:.3f}" for rate in rates)
    return dict(sorted(counts.items()))


async def measure(
    env: EnvClient,
    policy: Policy,
    task_ids: Sequence[str],
    *,
    siblings: int = 8,
    seed: int = 0,
    max_steps: int = DEFAULT_MAX_STEPS,
    concurrency: int = 64,
) -> Measurement:
    """Play ``siblings`` episodes of every task (seeds ``seed*1000 + sibling``) and summarize them."""
    started = time.monotonic()
    gate = asyncio.Semaphore(concurrency)

    async def one(task_id: str, sibling: int) -> EpisodeResult:
        async with gate:
            return await run_episode(env, policy, task_id, rollout_id=f"{task_id}/{sibling}",
                                     seed=seed * 1000 + sibling, max_steps=max_steps)

    groups = await asyncio.gather(*(asyncio.gather(*(one(t, s) for s in range(siblings))) for t in task_ids))
    flat = [r for group in groups for r in group]
    scored = [r for r in flat if r.scored]
    types = Counter(group_type(group) for group in groups)
    return Measurement(
        episodes=len(flat),
        success_rate=sum(r.success or 0.0 for r in scored) / max(1, len(scored)),
        reward_mean=sum(r.reward or 0.0 for r in scored) / max(1, len(scored)),
        group_types={t: types.get(t, 0) for t in GROUP_TYPES},
        per_task_success={t: sum(r.success or 0.0 for r in g) / len(g) for t, g in zip(task_ids, groups)},
        end_reasons=dict(Counter(r.end_reason or "none" for r in flat)),
        mean_turns=sum(r.turns for r in flat) / max(1, len(flat)),
        seconds=time.monotonic() - started,
    )


async def _main(args: argparse.Namespace) -> None:
    from shopsimrl.agent import make_policy
    from shopsimrl.env import InProcessEnvClient, load_env

    env = load_env(args.products, args.catalog_seed, args.cache_dir)
    client = InProcessEnvClient(env, owns_env=True)
    options = json.loads(args.options) if args.options else {}
    policy = make_policy("heuristic", **options)
    try:
        task_ids = (await client.list_tasks(args.split))[: args.tasks]
        result = await measure(client, policy, task_ids, siblings=args.siblings, seed=args.seed)
    finally:
        await policy.aclose()
        await client.aclose()
    print(json.dumps(result.as_dict(), indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description="Success rate and group types of the heuristic policy.")
    parser.add_argument("--products", type=int, default=20_000)
    parser.add_argument("--catalog-seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--siblings", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--options", default="", help='heuristic options as JSON, e.g. \'{"temperature": 0.8}\'')
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
