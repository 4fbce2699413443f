"""The episodes of the loop legs: a seeded world in place of model + SGLang + env, behind slime's generate hook seam.

A loop leg runs slime's whole train loop for 80+ steps and four launcher configurations,
tens of thousands of episodes: too many for real multi-turn episodes on a CPU.  So the
loop legs point slime's ``--custom-generate-function-path`` here.  What stays real is
everything around it: slime's ``generate_and_rm_group`` / ``generate_and_rm`` call this
function exactly as they call our generate hook (and the hook itself is run, against
the scripted SGLang and a real env server, by :mod:`.episodes`).

Each task has a fixed pass rate (a third never solved, a fifth always, the rest in
between); an episode's reward is a seeded draw from it, so a run is a function of the
sample indices slime hands out and a resumed run can be compared to an uninterrupted
one.  Episodes take a seeded number of event-loop turns, so groups complete out of
order, and stop as our hook does once slime has started its abort.  A small share of
episodes fail technically (unscored), as env or server failures would.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.slime.settings import slime_settings

TECHNICAL_RATE = 0.004
MAX_TURNS = 24


def _unit(*parts: Any) -> float:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def pass_rate(task_id: str, seed: int = 0) -> float:
    u = _unit("task", seed, task_id)
    if u < 0.35:
        return 0.0
    if u < 0.55:
        return 1.0
    return 0.1 + 0.8 * _unit("rate", seed, task_id)


@dataclass
class Episodes:
    """What the world generated: one row per episode started (rollout id, eval?, group, index, task, outcome)."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)


#: slime loads :func:`generate` by dotted path and calls it as a plain function: what it generated can only be
#: kept in module state (one object, in the leg's child process), which the leg reads at the end.
EPISODES = Episodes()


def _rollout_id() -> Any:
    return getattr(sys.modules.get("slime.rollout.sample_hooks"), "_current_rollout_id", None)


def _aborted(args: Any) -> bool:
    module = sys.modules.get("slime.rollout.sglang_rollout")
    return bool(module is not None and module.GenerateState(args).aborted)


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """One episode of the world, filled into slime's ``Sample`` as the ShopSim hook fills it."""
    seed = slime_settings(args).world_seed
    metadata = dict(getattr(sample, "metadata", None) or {})
    task_id = str(metadata.get("task_id", sample.prompt))
    key = ("eval" if evaluation else "train", seed, task_id, sample.index)
    turns = int(_unit("turns", *key) * MAX_TURNS)
    status = type(sample.status)
    for _ in range(turns):
        if _aborted(args):
            EPISODES.rows.append((_rollout_id(), evaluation, sample.group_index, sample.index, task_id, "aborted"))
            sample.rollout_id = sample.index
            sample.remove_sample = True
            sample.metadata = {**metadata, "shopsim_scored": False, "shopsim_aborted": True}
            sample.status = status.ABORTED
            return sample
        await asyncio.sleep(0)
    scored = _unit("technical", *key) >= TECHNICAL_RATE
    reward = 1.0 if _unit("reward", *key) < pass_rate(task_id, seed) else 0.0
    response = [7] * (1 + turns)
    sample.rollout_id = sample.index
    sample.tokens = [1, 2, 3, *response]
    sample.response = "x" * len(response)
    sample.response_length = len(response)
    sample.loss_mask = [1] * len(response) if scored else [0] * len(response)
    sample.rollout_log_probs = [-0.1] * len(response)
    sample.metadata = {**metadata, "shopsim_scored": scored, "shopsim_aborted": False, "shopsim_task_id": task_id}
    if scored:
        sample.reward = {"reward": reward, "r_strict": reward, "r_success": reward}
        sample.status = status.COMPLETED
    else:
        sample.reward = {"reward": 0.0}
        sample.remove_sample = True
        sample.status = status.ABORTED
    EPISODES.rows.append((_rollout_id(), evaluation, sample.group_index, sample.index, task_id,
                          reward if scored else "technical"))
    return sample
