"""slime ``Sample`` helpers shared by the hooks: outcomes, statuses, weights (settings: :mod:`.settings`).

Samples are read by attribute name only (``group_index``, ``index``,
``rollout_id``, ``reward``, ``metadata``, ``status``...), so slime's own
``Sample`` and a test stand-in with the same field names behave the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from shopsimrl.sampling import GroupOutcome, TrajectoryOutcome
from shopsimrl.sampling.verdict import (
    group_label,
    is_scored,
    iter_samples,
    rollout_key,
    sample_reward,
    unique_rollout_rewards,
)
from shopsimrl.slime.settings import slime_settings

# reward_detail keys the env reports once an episode ends (docs/dynamic-sampling.md §7: r_strict, r_success).
STRICT_KEY = "r_strict"
SUCCESS_KEY = "r_success"
#: The sample metadata key holding the selector's importance weight of the group's hand-out (absent: 1), which
#: the reward post-process multiplies into the group's advantages (``sampling/skip.py``, "The weight").
WEIGHT_KEY = "shopsim_weight"


def reward_key(args: Any) -> str:
    """slime's ``--reward-key`` (our rewards are dicts); ``"reward"`` when unset."""
    return slime_settings(args).reward_key


def scored_rewards(group: Sequence[Any], key: str) -> list[float] | None:
    """A completed group's rewards, one per unique rollout (``None``: a sample is unscored, a technical group):
    what the step and the selector hear of it."""
    samples = list(iter_samples(group))
    if not samples:
        raise ValueError(f"{group_label(group)} is empty: a group needs at least one sample")
    if not all(is_scored(s, key) for s in samples):
        return None
    return list(unique_rollout_rewards(samples, key, label=group_label(group)).values())


def task_of(group: Sequence[Any]) -> Any:
    """The prompt (ShopSim task id) a group of samples was drawn for."""
    first = next(iter(iter_samples(group)))
    return (first.metadata or {}).get("task_id", first.prompt)


def sample_status(sample: Any, name: str) -> Any:
    """The member ``name`` of the sample's own ``Status`` enum (slime nests it in ``Sample``)."""
    return type(sample).Status[name]


def _detail(reward: Any, key: str) -> float | None:
    value = reward.get(key) if isinstance(reward, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def trajectory_outcome(sample: Any, key: str) -> TrajectoryOutcome:
    scored = is_scored(sample, key)
    reward = sample_reward(sample, key) if scored else None
    detail = getattr(sample, "reward", None)
    strict = _detail(detail, STRICT_KEY) if scored else None
    return TrajectoryOutcome(
        rollout_id=rollout_key(sample),
        scored=scored,
        reward=reward,
        strict_reward=strict if strict is not None else reward,
        success=_detail(detail, SUCCESS_KEY) if scored else None,
    )


def group_outcome(group: Sequence[Any], key: str) -> GroupOutcome:
    """A slime group (flat, or per-rollout segment lists) as the metrics see it."""
    samples = list(iter_samples(group))
    if not samples:
        raise ValueError("a completed group has no samples")
    group_index = samples[0].group_index
    if group_index is None:
        raise ValueError("completed samples carry no group_index; the docs/dynamic-sampling.md §7 metrics count groups by it")
    return GroupOutcome(group_index=group_index, trajectories=[trajectory_outcome(s, key) for s in samples])


def group_outcomes(groups: Iterable[Sequence[Any]], key: str) -> list[GroupOutcome]:
    return [group_outcome(group, key) for group in groups]


def sample_weight(sample: Any) -> float:
    """The importance weight a sample's metadata carries (``WEIGHT_KEY``; 1 when absent)."""
    value = (getattr(sample, "metadata", None) or {}).get(WEIGHT_KEY, 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1.0:
        raise ValueError(f"sample index={getattr(sample, 'index', None)} has metadata {WEIGHT_KEY}={value!r}: "
                         "an importance weight is a finite number >= 1")
    return float(value)
