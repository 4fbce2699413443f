"""Measuring a policy the way the dynamic-sampling filter will see it: groups of sibling episodes.

Used to tune the heuristic, by its tests, and to produce the numbers in docs/agent.md
(``shopsimrl measure``, ``commands/measure.py``).  The groups run on the rollout's own group
runner (:func:`~shopsimrl.rollout.group.run_group`: the agent's episode loop, the
global episode-slot limit, a runner failure turned into a technical sibling) and get
the rollout's own label (:func:`~shopsimrl.rollout.group.classify`), so a measured
``varied`` is exactly a group the filter keeps (docs/dynamic-sampling.md §2).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shopsimrl.defaults import DEFAULT_MAX_TURNS
from shopsimrl.rollout.episode_runner import agent_runner
from shopsimrl.rollout.group import CLASSIFICATIONS, EpisodeSlots, EpisodeSpec, GroupRun, run_group

if TYPE_CHECKING:
    from shopsimrl.agent.policy import Policy
    from shopsimrl.env.types import EnvClient


@dataclass(frozen=True)
class Measurement:
    episodes: int
    success_rate: float
    reward_mean: float
    group_types: dict[str, int]  # label (rollout.group.CLASSIFICATIONS) -> groups
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


def _histogram(rates: Iterable[float]) -> dict[str, int]:
    """How many tasks had 0/8, 1/8 ... 8/8 successes (keys are the success share)."""
    counts = Counter(f"{rate:.3f}" for rate in rates)
    return dict(sorted(counts.items()))


def measurement_groups(task_ids: Sequence[str], *, siblings: int, seed: int) -> list[GroupRun]:
    """One group per task; sibling ``s`` has seed ``seed * 1000 + s`` on every task (no traces written)."""
    return [
        GroupRun(
            index=index,
            wave=1,
            task_id=task_id,
            specs=[
                EpisodeSpec(task_id=task_id, rollout_id=f"{task_id}/{s}", seed=seed * 1000 + s, trace_path=None,
                            group_index=index, sibling=s)
                for s in range(siblings)
            ],
        )
        for index, task_id in enumerate(task_ids)
    ]


async def measure(
    env: EnvClient,
    policy: Policy,
    task_ids: Sequence[str],
    *,
    siblings: int = 8,
    seed: int = 0,
    max_turns: int = DEFAULT_MAX_TURNS,
    concurrency: int = 64,
) -> Measurement:
    """Play ``siblings`` episodes of every task, at most ``concurrency`` at once, and summarize them."""
    started = time.monotonic()
    runner = agent_runner(env, policy, max_turns=max_turns)
    slots = EpisodeSlots(concurrency)
    groups = measurement_groups(task_ids, siblings=siblings, seed=seed)
    await asyncio.gather(*(run_group(group, runner, slots) for group in groups))
    flat = [ep for group in groups for ep in group.episodes]
    scored = [ep for ep in flat if ep.scored]
    labels = Counter(group.classification for group in groups)
    return Measurement(
        episodes=len(flat),
        success_rate=sum(ep.success or 0.0 for ep in scored) / max(1, len(scored)),
        reward_mean=sum(ep.reward or 0.0 for ep in scored) / max(1, len(scored)),
        group_types={label: labels.get(label, 0) for label in CLASSIFICATIONS},
        per_task_success={g.task_id: sum(ep.success or 0.0 for ep in g.episodes) / len(g.episodes) for g in groups},
        end_reasons=dict(Counter(ep.end_reason or "none" for ep in flat)),
        mean_turns=sum(ep.turns for ep in flat) / max(1, len(flat)),
        seconds=time.monotonic() - started,
    )
