"""The metric hooks add the docs/dynamic-sampling.md §7 keys to slime's metric dict, with values from sampling.rollout_step_metrics."""

from __future__ import annotations

import logging

import pytest

from shopsimrl.sampling import REASON_TECHNICAL, REASON_ZERO_STD, dynamic_filter_drop_key
from shopsimrl.sampling.metrics import STEP_METRIC_KEYS
from shopsimrl.slime.state import hook_state
from shopsimrl.slime_metrics import enrich_rollout_metrics, record_generated_rollout_groups


def step_groups(kit):
    """One step: 2 trained groups (one varied, one all-wrong fallback) + 1 zero-std drop + 1 technical drop."""
    varied = [kit.scored(0, 0, 1.0), kit.scored(0, 1, 0.5, success=0.0), kit.scored(0, 2, 0.0), kit.scored(0, 3, 1.0)]
    all_wrong = [kit.scored(1, 4 + i, 0.0) for i in range(4)]
    all_right = [kit.scored(2, 8 + i, 1.0) for i in range(4)]
    technical = [kit.scored(3, 12, 1.0), kit.unscored(3, 13), kit.scored(3, 14, 0.0), kit.scored(3, 15, 1.0)]
    return varied, all_wrong, all_right, technical


def test_spec_keys_and_values(kit):
    varied, all_wrong, all_right, technical = step_groups(kit)
    args = kit.args()
    assert record_generated_rollout_groups(args, [varied, all_wrong, all_right, technical], data_source=None) is None
    slime_metrics = {dynamic_filter_drop_key(REASON_ZERO_STD): 1, dynamic_filter_drop_key(REASON_TECHNICAL): 1}
    trained = varied + all_wrong  # slime flattens the kept groups before logging
    assert enrich_rollout_metrics(7, args, trained, slime_metrics, 12.5) is False
    p = "rollout/shopsim/"
    assert set(STEP_METRIC_KEYS) <= set(slime_metrics)
    assert slime_metrics[p + "trajectory_count"] == 16
    assert slime_metrics[p + "group_count"] == 4
    assert slime_metrics[p + "train_trajectory_count"] == 8
    assert slime_metrics[p + "train_group_count"] == 2
    assert slime_metrics[p + "scored_rate"] == pytest.approx(15 / 16)
    scored_rewards = [1.0, 0.5, 0.0, 1.0] + [0.0] * 4 + [1.0] * 4 + [1.0, 0.0, 1.0]
    assert slime_metrics[p + "reward_mean"] == pytest.approx(sum(scored_rewards) / 15)
    assert slime_metrics[p + "strict_reward_mean"] == pytest.approx(sum(scored_rewards) / 15)
    successes = [1.0, 0.0, 0.0, 1.0] + [0.0] * 4 + [1.0] * 4 + [1.0, 0.0, 1.0]
    assert slime_metrics[p + "success_rate"] == pytest.approx(sum(successes) / 15)
    assert slime_metrics[p + "all_wrong_group_rate"] == pytest.approx(1 / 3)  # of the 3 fully scored groups
    assert slime_metrics[p + "technical_group_drop_count"] == 1
    assert slime_metrics[p + "technical_group_drop_rate"] == pytest.approx(1 / 3)
    assert slime_metrics[p + "zero_std_group_drop_count"] == 1
    assert slime_metrics[p + "zero_std_group_drop_rate"] == pytest.approx(1 / 3)
    # slime's own counters stay as they were
    assert slime_metrics[dynamic_filter_drop_key(REASON_ZERO_STD)] == 1


def test_fan_out_trajectories_count_once(kit):
    group = [kit.scored(0, 0, 1.0, rollout_id=5), kit.scored(0, 1, 1.0, rollout_id=5), kit.scored(0, 2, 0.0, rollout_id=6)]
    record_generated_rollout_groups(kit.args(), [group], None)
    metrics: dict = {}
    enrich_rollout_metrics(0, kit.args(), group, metrics, 1.0)
    assert metrics["rollout/shopsim/trajectory_count"] == 2
    assert metrics["rollout/shopsim/train_trajectory_count"] == 2
    assert metrics["rollout/shopsim/reward_mean"] == pytest.approx(0.5)


def test_recorded_groups_are_used_once(kit):
    varied, *_ = step_groups(kit)
    record_generated_rollout_groups(kit.args(), [varied], None)
    enrich_rollout_metrics(0, kit.args(), varied, {}, 1.0)
    assert hook_state().completed_groups is None


def test_without_the_all_samples_hook_only_trained_groups_are_counted(kit, caplog):
    varied, all_wrong, *_ = step_groups(kit)
    metrics: dict = {}
    with caplog.at_level(logging.WARNING):
        assert enrich_rollout_metrics(3, kit.args(), varied + all_wrong, metrics, 1.0) is False
    assert "record_generated_rollout_groups" in caplog.text
    assert metrics["rollout/shopsim/group_count"] == 2
    assert metrics["rollout/shopsim/zero_std_group_drop_count"] == 0


def test_no_metric_dict_is_tolerated(kit, caplog):
    with caplog.at_level(logging.WARNING):
        assert enrich_rollout_metrics(0, kit.args(), [kit.scored(0, 0, 1.0)], None, 1.0) is False
    assert "not logged" in caplog.text
