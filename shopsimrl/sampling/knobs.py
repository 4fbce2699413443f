"""The dynamic-sampling knobs (docs/dynamic-sampling.md §1) and their validation; their defaults are
``shopsimrl.defaults``'."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from shopsimrl.defaults import (
    DEFAULT_GLOBAL_BATCH_SIZE,
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_N_SAMPLES_PER_PROMPT,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_ROLLOUT_BATCH_SIZE,
)
from shopsimrl.errors import Refusal

#: Two unique-rollout rewards closer than this are "equal" (docs/dynamic-sampling.md §2).
ZERO_STD_EPSILON = 1e-6


class KnobError(Refusal, ValueError):
    """A knob combination slime would refuse (or that makes no sense); the message says what to change."""


@dataclass(frozen=True)
class SamplingKnobs:
    """The docs/dynamic-sampling.md §1 knobs with the defaults of ``run_full_train.sh``."""

    rollout_batch_size: int = DEFAULT_ROLLOUT_BATCH_SIZE
    n_samples_per_prompt: int = DEFAULT_N_SAMPLES_PER_PROMPT
    over_sampling_batch_size: int = DEFAULT_OVER_SAMPLING_BATCH_SIZE
    global_batch_size: int = DEFAULT_GLOBAL_BATCH_SIZE
    max_consecutive_failed_groups: int = DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS

    def __post_init__(self) -> None:
        validate_wave_knobs(self.rollout_batch_size, self.over_sampling_batch_size)
        validate_update_knobs(self.rollout_batch_size, self.n_samples_per_prompt, self.global_batch_size)
        validate_failure_limit(self.max_consecutive_failed_groups)

    @property
    def episodes_per_step(self) -> int:
        return self.rollout_batch_size * self.n_samples_per_prompt

    @property
    def updates_per_step(self) -> int:
        return self.episodes_per_step // self.global_batch_size

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _require_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KnobError(f"{name} must be an integer, got {value!r}")
    return value


def validate_wave_knobs(rollout_batch_size: int, over_sampling_batch_size: int) -> None:
    target = _require_int("rollout_batch_size", rollout_batch_size)
    wave = _require_int("over_sampling_batch_size", over_sampling_batch_size)
    if target < 1:
        raise KnobError(f"rollout_batch_size must be >= 1 (groups to keep per step), got {target}")
    if wave < target:
        raise KnobError(
            f"over_sampling_batch_size ({wave}) must be >= rollout_batch_size ({target}), as slime requires: "
            f"set --over-sampling-batch-size to at least {target} (32 gives 16 spare slots for a target of 16)"
        )


def validate_update_knobs(rollout_batch_size: int, n_samples_per_prompt: int, global_batch_size: int) -> None:
    target = _require_int("rollout_batch_size", rollout_batch_size)
    n = _require_int("n_samples_per_prompt", n_samples_per_prompt)
    gbs = _require_int("global_batch_size", global_batch_size)
    if n < 1:
        raise KnobError(f"n_samples_per_prompt must be >= 1, got {n}")
    if gbs < 1:
        raise KnobError(f"global_batch_size must be >= 1, got {gbs}")
    episodes = target * n
    if episodes % gbs:
        divisors = [d for d in range(n, episodes + 1, n) if episodes % d == 0]
        raise KnobError(
            f"rollout_batch_size x n_samples_per_prompt = {target} x {n} = {episodes} episodes is not a multiple of "
            f"global_batch_size={gbs}: choose a global batch size among {divisors}"
        )
    if gbs % n:
        raise KnobError(
            f"global_batch_size={gbs} is not a multiple of n_samples_per_prompt={n}: an optimizer update must hold "
            f"whole groups (GRPO advantages are computed per group); use a multiple of {n}"
        )


def validate_failure_limit(max_consecutive_failed_groups: int) -> None:
    limit = _require_int("max_consecutive_failed_groups", max_consecutive_failed_groups)
    if limit < 1:
        raise KnobError(f"shopsim_max_consecutive_failed_groups must be >= 1, got {limit}")
