"""docs/dynamic-sampling.md §6-§7: metric keys, denominators and de-duplication."""

import pytest

from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    GroupOutcome,
    TrajectoryOutcome,
    WasteCounts,
    rollout_step_metrics,
)
from shopsimrl.sampling import metrics as m


def traj(rid, reward, success=None, scored=True):
    success = reward if success is None else success
    return TrajectoryOutcome(rid, scored, reward if scored else None, reward if scored else None, success if scored else None)


def group(gi, rewards, scored=True):
    return GroupOutcome(gi, [traj(i, r, scored=scored) for i, r in enumerate(rewards)])


def test_keys_have_the_exact_spec_names():
    assert m.STEP_METRIC_KEYS == (
        "rollout/shopsim/trajectory_count",
        "rollout/shopsim/group_count",
        "rollout/shopsim/train_trajectory_count",
        "rollout/shopsim/train_group_count",
        "rollout/shopsim/scored_rate",
        "rollout/shopsim/reward_mean",
        "rollout/shopsim/strict_reward_mean",
        "rollout/shopsim/success_rate",
        "rollout/shopsim/all_wrong_group_rate",
        "rollout/shopsim/technical_group_drop_count",
        "rollout/shopsim/technical_group_drop_rate",
        "rollout/shopsim/zero_std_group_drop_count",
        "rollout/shopsim/zero_std_group_drop_rate",
    )


def test_drop_rates_share_the_kept_groups_denominator_and_count_only_their_own_drops():
    completed = [group(i, [1.0, 0.0]) for i in range(16)] + [group(100 + i, [0.0, 0.0]) for i in range(16)]
    completed += [group(200 + i, [1.0, 0.0], scored=False) for i in range(4)]
    out = rollout_step_metrics(completed, range(16), {REASON_ZERO_STD: 16, REASON_TECHNICAL: 4})
    assert out[m.ZERO_STD_GROUP_DROP_RATE] == 16 / (16 + 16)
    assert out[m.TECHNICAL_GROUP_DROP_RATE] == 4 / (16 + 4)
    assert out[m.ZERO_STD_GROUP_DROP_COUNT] == 16 and out[m.TECHNICAL_GROUP_DROP_COUNT] == 4
    assert out["rollout/dynamic_filter/drop_shopsim_zero_std_group"] == 16


def test_success_and_reward_are_over_all_completed_scorable_generations_not_the_kept_ones():
    kept = [group(0, [1.0, 0.0]), group(1, [1.0, 1.0])]
    dropped = [group(2, [0.0, 0.0]), group(3, [0.0, 0.0])]
    technical = [GroupOutcome(4, [traj(0, 1.0), traj(1, 0.0, scored=False)])]
    out = rollout_step_metrics(kept + dropped + technical, [0, 1], {REASON_ZERO_STD: 2, REASON_TECHNICAL: 1})
    assert out[m.TRAJECTORY_COUNT] == 10 and out[m.GROUP_COUNT] == 5
    assert out[m.TRAIN_TRAJECTORY_COUNT] == 4 and out[m.TRAIN_GROUP_COUNT] == 2
    assert out[m.SCORED_RATE] == 9 / 10
    assert out[m.SUCCESS_RATE] == pytest.approx(4 / 9)  # 1+0+1+1+0+0+0+0 + the scored sibling of group 4
    assert out[m.REWARD_MEAN] == pytest.approx(4 / 9)
    # all-wrong share among fully scored groups only (group 4 is not fully scored)
    assert out[m.ALL_WRONG_GROUP_RATE] == 2 / 4


def test_trajectories_are_deduplicated_by_group_index_and_rollout_id():
    segments = GroupOutcome(0, [traj("a", 1.0), traj("a", 1.0), traj("a", 1.0), traj("b", 0.0)])
    same_ids_other_group = GroupOutcome(1, [traj("a", 0.0), traj("b", 0.0)])
    out = rollout_step_metrics([segments, same_ids_other_group], [0], {})
    assert out[m.TRAJECTORY_COUNT] == 4 and out[m.TRAIN_TRAJECTORY_COUNT] == 2
    assert out[m.SUCCESS_RATE] == 1 / 4


def test_a_trajectory_with_an_unscored_segment_is_unscored():
    g = GroupOutcome(0, [traj("a", 1.0), traj("a", 1.0, scored=False), traj("b", 0.0)])
    out = rollout_step_metrics([g], [], {REASON_TECHNICAL: 1})
    assert out[m.SCORED_RATE] == 1 / 2


def test_a_mean_over_nothing_is_omitted_not_reported_as_zero():
    out = rollout_step_metrics([group(0, [1.0], scored=False)], [], {REASON_TECHNICAL: 1})
    assert m.REWARD_MEAN not in out and m.SUCCESS_RATE not in out and m.ALL_WRONG_GROUP_RATE not in out
    assert out[m.SCORED_RATE] == 0.0 and out[m.TECHNICAL_GROUP_DROP_RATE] == 1.0
    assert m.ZERO_STD_GROUP_DROP_RATE not in out  # 0 / (0 + 0)


def test_waste_figures_count_groups_and_episodes_by_fate():
    out = rollout_step_metrics(
        [group(0, [1.0, 0.0])], [0], {}, waste=WasteCounts(64, 40, 16, 18, 6, 24), n_samples_per_prompt=8
    )
    assert out["rollout/shopsim/waste/groups_submitted"] == 64
    assert out["rollout/shopsim/waste/episodes_aborted"] == 24 * 8
    assert out["rollout/shopsim/waste/kept_share_of_submitted"] == 16 / 64


def test_trained_groups_must_have_completed():
    with pytest.raises(ValueError, match="not among the completed"):
        rollout_step_metrics([group(0, [1.0, 0.0])], [5], {})
