"""slime ``Sample`` helpers shared by the hooks: settings read from ``args``, outcomes, statuses.

Samples are read by attribute name only (``group_index``, ``index``,
``rollout_id``, ``reward``, ``metadata``, ``status``...), so slime's own
``Sample`` and a test stand-in with the same field names behave the same.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from shopsimrl.defaults import (
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_MAX_TURNS,
    DEFAULT_SLOTS,
    DEFAULT_TRACE_DIR,
    DEFAULT_URL,
)
from shopsimrl.sampling import GroupOutcome, TrajectoryOutcome
from shopsimrl.sampling.verdict import DEFAULT_REWARD_KEY, is_scored, iter_samples, rollout_key, sample_reward

# reward_detail keys the env reports once an episode ends (docs/dynamic-sampling.md §7: r_strict, r_success).
STRICT_KEY = "r_strict"
SUCCESS_KEY = "r_success"
#: The sample metadata key holding the prompt source's importance weight of the group's hand-out (absent: 1), which
#: the reward post-process multiplies into the group's advantages (``sampling/informative.py``, "The weight").
WEIGHT_KEY = "shopsim_weight"


def reward_key(args: Any) -> str:
    """slime's ``--reward-key`` (our rewards are dicts); ``"reward"`` when unset."""
    return getattr(args, "reward_key", None) or DEFAULT_REWARD_KEY


def max_consecutive_failed_groups(args: Any) -> int:
    value = getattr(args, "shopsim_max_consecutive_failed_groups", None)
    return DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS if value is None else value


def trace_dir(args: Any) -> str:
    return str(getattr(args, "shopsim_trace_dir", None) or DEFAULT_TRACE_DIR)


def env_slots(args: Any) -> int:
    """How many episodes may hold an env slot at once (``args.shopsim_env_slots``)."""
    value = getattr(args, "shopsim_env_slots", None)
    return DEFAULT_SLOTS if value is None else int(value)


def env_url(args: Any) -> str:
    return str(getattr(args, "shopsim_env_url", None) or DEFAULT_URL)


#: The custom-config key of the turn cap before it was named in turns; read for one more release.
DEPRECATED_MAX_TURNS_KEY = "shopsim_max_steps"


def max_turns(args: Any) -> int:
    """Turns per episode (``args.shopsim_max_turns``, from the launcher's custom config).

    The old key ``shopsim_max_steps`` (a custom config written by an older launcher) is still read when
    the new one is absent, with a ``FutureWarning`` naming the new key; Python's default warning filter
    shows it on stderr once per process, not once per episode.
    """
    value = getattr(args, "shopsim_max_turns", None)
    if value is None:
        value = getattr(args, DEPRECATED_MAX_TURNS_KEY, None)
        if value is not None:
            warnings.warn(f"the custom-config key {DEPRECATED_MAX_TURNS_KEY} is deprecated and will be removed in the "
                          f"next release: use shopsim_max_turns", FutureWarning, stacklevel=2)
    return DEFAULT_MAX_TURNS if value is None else int(value)


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
