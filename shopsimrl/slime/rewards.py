"""GRPO advantages per prompt group and rollout (``--custom-reward-post-process-path``).

slime's default post-process reshapes rewards by position; ShopSim's groups are the
samples' ``group_index`` and its statistics are taken once per ``rollout_id`` (fan-out
segments are one trajectory).  The arithmetic is the sampling core's
(``sampling.grpo_advantages``).  Stable dotted path:
``shopsimrl.slime_runtime.normalize_grpo_by_prompt_and_rollout``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from shopsimrl.sampling import grpo_advantages
from shopsimrl.sampling.verdict import iter_samples, rollout_key, sample_reward
from shopsimrl.slime.samples import reward_key, sample_weight

# slime's RolloutManager._post_process_rewards (slime/ray/rollout.py): the estimators whose rewards it
# centers per prompt group, and those it also divides by the group's std (--advantage-estimator choices:
# grpo, gspo, cispo, reinforce_plus_plus, reinforce_plus_plus_baseline, ppo; the others get raw rewards).
GROUP_NORMALIZED_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_NORMALIZED_ESTIMATORS = ("grpo", "gspo", "cispo")


def normalize_grpo_by_prompt_and_rollout(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """``(raw_rewards, advantages)`` aligned with ``samples``, like slime's ``_post_process_rewards``.

    Differences from slime's default, on purpose: statistics are taken once per unique
    ``rollout_id`` (fan-out segments are one trajectory), and groups are the samples'
    ``group_index`` (slime reshapes by position).  Without ``group_index``, unique rollouts
    are chunked by ``n_samples_per_prompt`` in order, as slime's reshape does.
    A group whose samples carry an importance weight (``shopsim_weight`` metadata, the informative
    rule's) has its advantages multiplied by it.  ``--disable-rewards-normalization`` returns the raw
    rewards; ``--disable-grpo-std-normalization`` keeps the centering but not the std division.
    """
    flat = list(iter_samples(samples))
    key = reward_key(args)
    raw = []
    for sample in flat:
        reward = sample_reward(sample, key)
        if reward is None:
            raise ValueError(f"sample index={getattr(sample, 'index', None)} has no finite reward under key {key!r}")
        raw.append(reward)
    estimator = getattr(args, "advantage_estimator", "grpo")
    if not getattr(args, "rewards_normalization", True) or estimator not in GROUP_NORMALIZED_ESTIMATORS:
        return raw, list(raw)
    std = bool(getattr(args, "grpo_std_normalization", True)) and estimator in STD_NORMALIZED_ESTIMATORS
    advantages = [0.0] * len(flat)
    for label, positions in _prompt_groups(flat, getattr(args, "n_samples_per_prompt", None)).items():
        values = grpo_advantages(
            [rollout_key(flat[i]) for i in positions], [raw[i] for i in positions], std_normalization=std, label=label
        )
        weight = _group_weight([flat[i] for i in positions], label)
        for position, value in zip(positions, values):
            advantages[position] = value * weight
    return raw, advantages


def _group_weight(group: list[Any], label: str) -> float:
    """The importance weight the group's samples carry (``WEIGHT_KEY``): one value for the whole group."""
    weights = {sample_weight(sample) for sample in group}
    if len(weights) > 1:
        raise ValueError(f"{label}: its samples carry different importance weights {sorted(weights)}")
    return weights.pop() if weights else 1.0


def _prompt_groups(samples: list[Any], n_samples_per_prompt: int | None) -> dict[str, list[int]]:
    """Positions of each prompt group: by ``group_index``, or by chunks of ``n`` unique rollouts."""
    with_index = [getattr(s, "group_index", None) is not None for s in samples]
    groups: dict[str, list[int]] = {}
    if all(with_index):
        for position, sample in enumerate(samples):
            groups.setdefault(f"group_index={sample.group_index}", []).append(position)
        return groups
    if any(with_index):
        raise ValueError("reward normalization needs group_index on every sample or on none of them")
    order: dict[Hashable, int] = {}
    for sample in samples:
        order.setdefault(rollout_key(sample), len(order))
    n = n_samples_per_prompt or len(order)
    if len(order) % n:
        raise ValueError(
            f"{len(order)} unique rollouts do not split into prompt groups of n_samples_per_prompt={n}; "
            "set group_index on the samples"
        )
    for position, sample in enumerate(samples):
        groups.setdefault(f"prompt group {order[rollout_key(sample)] // n}", []).append(position)
    return groups
