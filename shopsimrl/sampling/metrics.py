"""The docs/dynamic-sampling.md §7 metrics of one rollout step, plus the waste figures no peer reports.

One function serves the standalone runtime and slime's metric hooks.  Every
trajectory is counted once per ``(group_index, rollout_id)``: fan-out segments
of one trajectory are one trajectory.  A mean over nothing is omitted, never
reported as 0.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from shopsimrl.sampling.filter import REASON_TECHNICAL, REASON_ZERO_STD

PREFIX = "rollout/shopsim/"
TRAJECTORY_COUNT = PREFIX + "trajectory_count"
GROUP_COUNT = PREFIX + "group_count"
TRAIN_TRAJECTORY_COUNT = PREFIX + "train_trajectory_count"
TRAIN_GROUP_COUNT = PREFIX + "train_group_count"
SCORED_RATE = PREFIX + "scored_rate"
REWARD_MEAN = PREFIX + "reward_mean"
STRICT_REWARD_MEAN = PREFIX + "strict_reward_mean"
SUCCESS_RATE = PREFIX + "success_rate"
ALL_WRONG_GROUP_RATE = PREFIX + "all_wrong_group_rate"
TECHNICAL_GROUP_DROP_COUNT = PREFIX + "technical_group_drop_count"
TECHNICAL_GROUP_DROP_RATE = PREFIX + "technical_group_drop_rate"
ZERO_STD_GROUP_DROP_COUNT = PREFIX + "zero_std_group_drop_count"
ZERO_STD_GROUP_DROP_RATE = PREFIX + "zero_std_group_drop_rate"
WASTE_PREFIX = PREFIX + "waste/"

#: The keys of docs/dynamic-sampling.md §7 that this module computes (slime's drop_<reason> keys come from slime itself).
STEP_METRIC_KEYS = (
    TRAJECTORY_COUNT,
    GROUP_COUNT,
    TRAIN_TRAJECTORY_COUNT,
    TRAIN_GROUP_COUNT,
    SCORED_RATE,
    REWARD_MEAN,
    STRICT_REWARD_MEAN,
    SUCCESS_RATE,
    ALL_WRONG_GROUP_RATE,
    TECHNICAL_GROUP_DROP_COUNT,
    TECHNICAL_GROUP_DROP_RATE,
    ZERO_STD_GROUP_DROP_COUNT,
    ZERO_STD_GROUP_DROP_RATE,
)


def dynamic_filter_drop_key(reason: str) -> str:
    """slime's own per-reason drop counter."""
    return f"rollout/dynamic_filter/drop_{reason}"


@dataclass(frozen=True, slots=True)
class TrajectoryOutcome:
    """What the metrics need of one trajectory (or of one fan-out segment of it)."""

    rollout_id: Hashable
    scored: bool
    reward: float | None = None
    strict_reward: float | None = None
    success: float | None = None  # r_success: 1.0 or 0.0


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """A completed group: every sibling (segment) that came back from generation."""

    group_index: int
    trajectories: Sequence[TrajectoryOutcome]


@dataclass(frozen=True, slots=True)
class WasteCounts:
    """Where the generated groups went; episodes = groups x n_samples_per_prompt."""

    submitted: int
    completed: int
    kept: int
    dropped: int
    surplus: int
    aborted: int


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _unique(groups: Iterable[GroupOutcome]) -> dict[int, dict[Hashable, TrajectoryOutcome]]:
    by_group: dict[int, dict[Hashable, TrajectoryOutcome]] = {}
    for group in groups:
        trajectories = by_group.setdefault(group.group_index, {})
        for t in group.trajectories:
            previous = trajectories.get(t.rollout_id)
            # a trajectory is scored only if every one of its segments is
            if previous is None or (previous.scored and not t.scored):
                trajectories[t.rollout_id] = t
    return by_group


def drop_rate(drop_count: int, train_group_count: int) -> float | None:
    """``X_drop_count / (train_group_count + X_drop_count)``: both drop rates share the kept-groups denominator."""
    denominator = train_group_count + drop_count
    return drop_count / denominator if denominator else None


def rollout_step_metrics(
    completed: Iterable[GroupOutcome],
    trained_group_indices: Collection[int],
    drop_counts: Mapping[str, int],
    *,
    waste: WasteCounts | None = None,
    n_samples_per_prompt: int | None = None,
) -> dict[str, float]:
    """The docs/dynamic-sampling.md §7 keys for one step.

    ``completed``: every group whose generation finished (kept, dropped, surplus;
    aborted work excluded).  ``trained_group_indices``: the ``group_index`` of the
    groups that entered the trainer.  ``drop_counts``: groups actually dropped, by
    reason (slime's ``rollout/dynamic_filter/drop_<reason>``).
    """
    by_group = _unique(completed)
    trained = set(trained_group_indices)
    unknown = trained - by_group.keys()
    if unknown:
        raise ValueError(f"trained groups {sorted(unknown)[:5]} are not among the completed groups")
    all_trajectories = [t for ts in by_group.values() for t in ts.values()]
    scored = [t for t in all_trajectories if t.scored]
    fully_scored_groups = [ts for ts in by_group.values() if ts and all(t.scored for t in ts.values())]
    technical = int(drop_counts.get(REASON_TECHNICAL, 0))
    zero_std = int(drop_counts.get(REASON_ZERO_STD, 0))
    train_groups = len(trained)
    metrics: dict[str, float | None] = {
        TRAJECTORY_COUNT: len(all_trajectories),
        GROUP_COUNT: len(by_group),
        TRAIN_TRAJECTORY_COUNT: sum(len(by_group[g]) for g in trained),
        TRAIN_GROUP_COUNT: train_groups,
        SCORED_RATE: len(scored) / len(all_trajectories) if all_trajectories else None,
        REWARD_MEAN: _mean([t.reward for t in scored if t.reward is not None]),
        STRICT_REWARD_MEAN: _mean([t.strict_reward for t in scored if t.strict_reward is not None]),
        SUCCESS_RATE: _mean([t.success for t in scored if t.success is not None]),
        ALL_WRONG_GROUP_RATE: (
            sum(all(not t.success for t in ts.values()) for ts in fully_scored_groups) / len(fully_scored_groups)
            if fully_scored_groups
            else None
        ),
        TECHNICAL_GROUP_DROP_COUNT: technical,
        TECHNICAL_GROUP_DROP_RATE: drop_rate(technical, train_groups),
        ZERO_STD_GROUP_DROP_COUNT: zero_std,
        ZERO_STD_GROUP_DROP_RATE: drop_rate(zero_std, train_groups),
    }
    for reason, count in drop_counts.items():
        metrics[dynamic_filter_drop_key(reason)] = int(count)
    if waste is not None:
        metrics.update(waste_metrics(waste, n_samples_per_prompt))
    return {k: float(v) for k, v in metrics.items() if v is not None}


def waste_metrics(waste: WasteCounts, n_samples_per_prompt: int | None) -> dict[str, float]:
    """Groups (and episodes, when ``n_samples_per_prompt`` is given) by fate."""
    out: dict[str, float] = {}
    for fate in ("submitted", "completed", "kept", "dropped", "surplus", "aborted"):
        groups = getattr(waste, fate)
        out[f"{WASTE_PREFIX}groups_{fate}"] = float(groups)
        if n_samples_per_prompt is not None:
            out[f"{WASTE_PREFIX}episodes_{fate}"] = float(groups * n_samples_per_prompt)
    if waste.completed:
        out[f"{WASTE_PREFIX}kept_share_of_completed"] = waste.kept / waste.completed
    if waste.submitted:
        out[f"{WASTE_PREFIX}kept_share_of_submitted"] = waste.kept / waste.submitted
    return out
