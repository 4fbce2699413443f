"""docs/dynamic-sampling.md §2: the verdict of a fully generated group (technical / zero-std / varied)."""

import math
from types import SimpleNamespace

import pytest

from shopsimrl.sampling import Verdict, group_verdict, unique_rollout_rewards


def s(index, reward, *, rollout_id=None, scored=True, group_index=7):
    return {
        "index": index,
        "rollout_id": rollout_id,
        "group_index": group_index,
        "reward": reward,
        "metadata": {"shopsim_scored": scored},
    }


def test_varied_group_is_kept_when_spread_exceeds_epsilon():
    assert group_verdict([s(0, 1.0), s(1, 0.0), s(2, 0.0)]) is Verdict.VARIED


@pytest.mark.parametrize("value", [0.0, 1.0, 0.5])
def test_zero_std_all_right_all_wrong_or_same_intermediate_value(value):
    assert group_verdict([s(i, value) for i in range(8)]) is Verdict.ZERO_STD


def test_spread_of_exactly_epsilon_is_zero_std_and_just_above_is_varied():
    assert group_verdict([s(0, 0.0), s(1, 1e-6)]) is Verdict.ZERO_STD  # max - min == 1e-6 exactly
    assert group_verdict([s(0, 0.5), s(1, 0.5 + 3e-6)]) is Verdict.VARIED


def test_fewer_than_two_unique_rollouts_is_zero_std():
    assert group_verdict([s(0, 1.0)]) is Verdict.ZERO_STD
    # three fan-out segments of one rollout are one sample, not three
    assert group_verdict([s(0, 1.0, rollout_id="r"), s(1, 1.0, rollout_id="r"), s(2, 1.0, rollout_id="r")]) is Verdict.ZERO_STD


@pytest.mark.parametrize(
    "bad",
    [
        {"scored": False},
        {"scored": None},
        {"scored": "true"},  # only the boolean True counts as scored
        {"reward": None},
        {"reward": True},  # a bool is not a reward
        {"reward": math.nan},
        {"reward": math.inf},
        {"reward": -math.inf},
        {"reward": "1.0"},
        {"reward": {"other": 1.0}},  # dict without the reward key
    ],
)
def test_technical_when_any_sibling_is_unscorable(bad):
    kwargs = {"scored": bad.get("scored", True)}
    reward = bad.get("reward", 1.0)
    group = [s(0, 1.0), s(1, 0.0), s(2, reward, **kwargs)]
    assert group_verdict(group) is Verdict.TECHNICAL


def test_technical_takes_precedence_over_zero_std_and_spread():
    assert group_verdict([s(0, 1.0), s(1, 1.0, scored=False)]) is Verdict.TECHNICAL
    assert group_verdict([s(0, 1.0), s(1, 0.0, scored=False)]) is Verdict.TECHNICAL


def test_missing_metadata_is_unscored():
    assert group_verdict([{"index": 0, "reward": 1.0}, s(1, 0.0)]) is Verdict.TECHNICAL


def test_reward_dict_read_with_the_reward_key():
    group = [s(0, {"reward": 1.0, "r_loose": 0.5}), s(1, {"reward": 0.0, "r_loose": 0.5})]
    assert group_verdict(group) is Verdict.VARIED
    assert group_verdict(group, reward_key="r_loose") is Verdict.ZERO_STD


def test_rollout_id_none_means_index():
    group = [s(0, 1.0), s(1, 0.0)]
    assert list(unique_rollout_rewards(group)) == [0, 1]


def test_fan_out_segments_are_deduplicated_per_rollout_id():
    # rollout a: 3 segments rewarded 1.0; rollout b: 1 segment rewarded 0.0 -> 2 unique rollouts
    flat = [s(0, 1.0, rollout_id="a"), s(1, 1.0, rollout_id="a"), s(2, 1.0, rollout_id="a"), s(3, 0.0, rollout_id="b")]
    assert unique_rollout_rewards(flat) == {"a": 1.0, "b": 0.0}
    nested = [[s(0, 1.0, rollout_id="a"), s(1, 1.0, rollout_id="a")], [s(2, 0.0, rollout_id="b")]]
    assert group_verdict(nested) is Verdict.VARIED
    assert group_verdict(flat) is Verdict.VARIED


def test_segments_of_one_rollout_with_different_rewards_are_a_data_error_naming_group_and_rollout():
    group = [s(0, 1.0, rollout_id="traj-3"), s(1, 0.0, rollout_id="traj-3"), s(2, 0.5)]
    with pytest.raises(ValueError, match=r"group_index=7.*traj-3"):
        group_verdict(group)


def test_object_samples_like_slimes_are_supported():
    group = [
        SimpleNamespace(index=i, rollout_id=None, group_index=1, reward=r, metadata={"shopsim_scored": True})
        for i, r in enumerate([0.0, 0.0, 1.0])
    ]
    assert group_verdict(group) is Verdict.VARIED


def test_empty_group_is_refused():
    with pytest.raises(ValueError, match="empty"):
        group_verdict([])


def test_verdict_parse_accepts_strings_and_refuses_unknown():
    assert Verdict.parse("zero_std") is Verdict.ZERO_STD
    assert Verdict.parse(Verdict.VARIED) is Verdict.VARIED
    with pytest.raises(ValueError, match="unknown verdict"):
        Verdict.parse("ok")


def test_rewards_verdict_none_is_technical_else_the_spread_rule_of_the_samples_verdict():
    from shopsimrl.sampling.verdict import rewards_verdict

    assert rewards_verdict(None) is Verdict.TECHNICAL  # some sibling could not be scored
    assert rewards_verdict([0.0, 1e-6]) is Verdict.ZERO_STD  # max - min == 1e-6 exactly, as group_verdict
    assert rewards_verdict([0.5, 0.5 + 3e-6]) is Verdict.VARIED
    assert rewards_verdict([1.0]) is Verdict.ZERO_STD
    for rewards in ([1.0, 0.0, 0.0], [0.0] * 8, [0.5, 0.5 + 3e-6]):
        assert rewards_verdict(rewards) is group_verdict([s(i, r) for i, r in enumerate(rewards)])
