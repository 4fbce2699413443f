"""GRPO advantages by prompt and rollout, the optimizer-update split (docs/dynamic-sampling.md §6) and knob validation."""

import statistics

import pytest

from shopsimrl.sampling import KnobError, SamplingKnobs, grpo_advantages, split_into_updates


def test_grpo_advantage_uses_unbiased_std_plus_epsilon():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0]
    adv = grpo_advantages(list(range(8)), rewards)
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)  # stdev: n - 1, like torch
    assert adv == pytest.approx([(r - mean) / (std + 1e-6) for r in rewards], rel=1e-12)


def test_std_division_is_optional():
    adv = grpo_advantages([0, 1, 2], [1.0, 0.0, 0.5], std_normalization=False)
    assert adv == pytest.approx([0.5, -0.5, 0.0])


def test_advantages_are_computed_per_rollout_and_broadcast_to_fan_out_segments():
    ids = ["a", "a", "a", "b"]
    adv = grpo_advantages(ids, [1.0, 1.0, 1.0, 0.0])
    # two unique rollouts (1.0, 0.0): mean 0.5, unbiased std sqrt(0.5)
    expected = 0.5 / (0.5**0.5 + 1e-6)
    assert adv == pytest.approx([expected, expected, expected, -expected])


def test_zero_std_group_has_zero_advantage_and_single_rollout_is_zero_not_nan():
    assert grpo_advantages([0, 1, 2], [1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert grpo_advantages(["x", "x"], [0.3, 0.3]) == [0.0, 0.0]


def test_segments_with_different_rewards_are_refused():
    with pytest.raises(ValueError, match="rollout_id='a'"):
        grpo_advantages(["a", "a"], [1.0, 0.0])


def test_sixteen_groups_of_eight_with_global_batch_64_make_two_updates_of_eight_whole_groups():
    updates = split_into_updates(list(range(16)), 8, 64)
    assert updates == [list(range(8)), list(range(8, 16))]


def test_update_split_refuses_a_global_batch_that_does_not_divide_the_episodes():
    with pytest.raises(KnobError, match="not a multiple of global_batch_size=48"):
        split_into_updates(list(range(16)), 8, 48)


def test_update_split_refuses_a_global_batch_that_cuts_a_group():
    with pytest.raises(KnobError, match="whole groups"):
        split_into_updates(list(range(16)), 8, 4)


def test_default_knobs_are_the_full_train_script_defaults():
    k = SamplingKnobs()
    assert k.as_dict() == {
        "rollout_batch_size": 16,
        "n_samples_per_prompt": 8,
        "over_sampling_batch_size": 32,
        "global_batch_size": 64,
        "max_consecutive_failed_groups": 8,
    }
    assert k.episodes_per_step == 128 and k.updates_per_step == 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"over_sampling_batch_size": 8}, "at least 16"),
        ({"global_batch_size": 48}, "choose a global batch size among"),
        ({"max_consecutive_failed_groups": 0}, ">= 1"),
        ({"rollout_batch_size": 0}, ">= 1"),
        ({"n_samples_per_prompt": 2.5}, "integer"),
    ],
)
def test_bad_knobs_are_refused_with_what_to_change(kwargs, match):
    with pytest.raises(KnobError, match=match):
        SamplingKnobs(**kwargs)
