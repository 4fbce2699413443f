"""Verdicts: what a fully generated group is worth to GRPO (docs/dynamic-sampling.md §2).

A group is a flat list of slime-like samples, or a list of lists when one
multi-turn trajectory fans out into several token-contiguous training samples.
Samples may be objects (slime's ``Sample``) or mappings with the same field
names: ``index``, ``rollout_id`` (None means ``index``), ``reward`` (a number,
or a dict read with the reward key) and ``metadata["shopsim_scored"]``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any

from shopsimrl.sampling.knobs import ZERO_STD_EPSILON

DEFAULT_REWARD_KEY = "reward"


class Verdict(str, Enum):
    TECHNICAL = "technical"  # some sibling could not be scored: drop, never a fallback
    ZERO_STD = "zero_std"  # all unique-rollout rewards equal: GRPO advantage identically 0
    VARIED = "varied"  # reward spread > 1e-6: kept

    @classmethod
    def parse(cls, value: Verdict | str) -> Verdict:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            choices = ", ".join(repr(v.value) for v in cls)
            raise ValueError(f"unknown verdict {value!r}; expected one of {choices}") from None


_MISSING = object()


def _field(sample: Any, name: str, default: Any = _MISSING) -> Any:
    if isinstance(sample, Mapping):
        return sample.get(name, None if default is _MISSING else default)
    return getattr(sample, name, None if default is _MISSING else default)


def iter_samples(group: Iterable[Any]) -> Iterator[Any]:
    """Flatten a group: a flat list of samples or a list of per-rollout segment lists."""
    for item in group:
        if isinstance(item, (list, tuple)):
            yield from item
        else:
            yield item


def rollout_key(sample: Any) -> Hashable:
    """The identity of the trajectory a sample belongs to: ``rollout_id``, or ``index`` when absent."""
    rid = _field(sample, "rollout_id")
    return _field(sample, "index") if rid is None else rid


def sample_reward(sample: Any, reward_key: str | None = DEFAULT_REWARD_KEY) -> float | None:
    """The sample's scalar reward, or None when it is missing or not a finite real number."""
    reward = _field(sample, "reward")
    if isinstance(reward, Mapping):
        reward = reward.get(reward_key) if reward_key else None
    if reward is None or isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return None
    value = float(reward)
    return value if math.isfinite(value) else None


def is_scored(sample: Any, reward_key: str | None = DEFAULT_REWARD_KEY) -> bool:
    metadata = _field(sample, "metadata") or {}
    scored = metadata.get("shopsim_scored") if isinstance(metadata, Mapping) else None
    return scored is True and sample_reward(sample, reward_key) is not None


def group_label(group: Sequence[Any], fallback: object = None) -> str:
    """A name for the group in error messages: slime's ``group_index`` when the samples carry it."""
    for sample in iter_samples(group):
        gi = _field(sample, "group_index")
        if gi is not None:
            return f"group_index={gi}"
        break
    return f"group {fallback}" if fallback is not None else "group"


def unique_rollout_rewards(
    group: Sequence[Any], reward_key: str | None = DEFAULT_REWARD_KEY, *, label: object = None
) -> dict[Hashable, float]:
    """Rewards taken once per unique rollout (first-seen order).

    Raises ``ValueError`` when a sample has no finite reward, or when segments of
    one rollout disagree: that is a data error, not a technical failure.
    """
    rewards: dict[Hashable, float] = {}
    for sample in iter_samples(group):
        key = rollout_key(sample)
        reward = sample_reward(sample, reward_key)
        if reward is None:
            raise ValueError(f"{group_label(group, label)}: rollout {key!r} has no finite reward")
        seen = rewards.setdefault(key, reward)
        if seen != reward:
            raise ValueError(
                f"{group_label(group, label)}: segments of rollout_id={key!r} carry different rewards "
                f"({seen!r} and {reward!r}); fan-out segments of one trajectory must share its reward"
            )
    return rewards


def reward_spread_verdict(rewards: Iterable[float]) -> Verdict:
    """ZERO_STD when fewer than 2 values or max - min <= 1e-6, else VARIED."""
    values = list(rewards)
    if len(values) < 2 or max(values) - min(values) <= ZERO_STD_EPSILON:
        return Verdict.ZERO_STD
    return Verdict.VARIED


def rewards_verdict(rewards: Iterable[float] | None) -> Verdict:
    """A group's verdict from its unique-rollout rewards, ``None`` when some sibling was not scored: for a caller
    that holds rewards, not samples (the simulator), so the technical and spread rules stay written once."""
    return Verdict.TECHNICAL if rewards is None else reward_spread_verdict(rewards)


def group_verdict(group: Sequence[Any], reward_key: str | None = DEFAULT_REWARD_KEY, *, label: object = None) -> Verdict:
    """TECHNICAL if any sample is unscored; else ZERO_STD or VARIED over unique-rollout rewards."""
    samples = list(iter_samples(group))
    if not samples:
        raise ValueError(f"{group_label(group, label)} is empty: a group needs at least one sample")
    if not all(is_scored(s, reward_key) for s in samples):
        return Verdict.TECHNICAL
    return reward_spread_verdict(unique_rollout_rewards(samples, reward_key, label=label or group_label(group)).values())
