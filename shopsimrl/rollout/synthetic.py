"""Synthetic episodes: a runner with chosen outcomes and durations and no environment at all.

Used to test the driver without ShopSim and to measure the driver's own cost
(a zero-delay synthetic step is pure driver overhead).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.rollout.group import EpisodeMeter, EpisodeRunner, EpisodeSpec

#: (scored, reward) for one episode; success is reward == 1.
Outcome = Callable[[EpisodeSpec], tuple[bool, float | None]]


def unit_hash(*parts: object) -> float:
    """A stable number in [0, 1) from ``parts``."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def task_difficulty_outcome(spec: EpisodeSpec) -> tuple[bool, float | None]:
    """Each task has a success probability; each sibling succeeds (reward 1) or not (reward 0)."""
    p = unit_hash("task", spec.task_id)
    return True, 1.0 if unit_hash("episode", spec.seed) < p else 0.0


def synthetic_runner(
    outcome: Outcome = task_difficulty_outcome,
    *,
    delay: float | Callable[[EpisodeSpec], float] = 0.0,
    env_steps: int = 5,
) -> EpisodeRunner:
    """A runner whose episodes take ``delay`` seconds (``asyncio.sleep``) and end with ``outcome``."""

    async def run(spec: EpisodeSpec, meter: EpisodeMeter) -> EpisodeResult:
        seconds = delay(spec) if callable(delay) else delay
        await asyncio.sleep(seconds)
        meter.env_steps += env_steps
        scored, reward = outcome(spec)
        return EpisodeResult(
            task_id=spec.task_id,
            rollout_id=spec.rollout_id,
            seed=spec.seed,
            policy="synthetic",
            scored=scored,
            reward=reward if scored else None,
            strict_reward=reward if scored else None,
            success=(1.0 if reward == 1.0 else 0.0) if scored else None,
            end_reason="purchase" if scored else None,
            error=None if scored else {"type": "EnvError", "message": "synthetic failure", "stage": "step"},
            turns=env_steps,
            env_steps=env_steps,
            wall_seconds=seconds,
        )

    return run
