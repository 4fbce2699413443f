"""normalize_grpo_by_prompt_and_rollout: slime's post-process contract, per prompt group and unique rollout."""

from __future__ import annotations

import math

import pytest

from shopsimrl.sampling import grpo_advantages
from shopsimrl.slime_runtime import normalize_grpo_by_prompt_and_rollout


def test_std_normalized_advantages_by_group_index(kit):
    samples = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])] + [
        kit.scored(1, 4 + i, r) for i, r in enumerate([1.0, 1.0, 1.0, 0.0])
    ]
    raw, adv = normalize_grpo_by_prompt_and_rollout(kit.args(), samples)
    assert raw == [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    a = 0.5 / (math.sqrt(4 * 0.25 / 3) + 1e-6)  # centered by 0.5, divided by the unbiased std
    assert adv[:4] == pytest.approx([a, -a, -a, a])
    assert adv[4:] == pytest.approx(grpo_advantages([4, 5, 6, 7], [1.0, 1.0, 1.0, 0.0]))


def test_fan_out_segments_are_one_rollout_and_share_its_advantage(kit):
    # rollout 100 has three segments: slime's per-sample mean would weigh it three times.
    samples = [kit.scored(0, 0, 1.0, rollout_id=100), kit.scored(0, 1, 1.0, rollout_id=100),
               kit.scored(0, 2, 1.0, rollout_id=100), kit.scored(0, 3, 0.0, rollout_id=101)]
    raw, adv = normalize_grpo_by_prompt_and_rollout(kit.args(), samples)
    assert raw == [1.0, 1.0, 1.0, 0.0]
    expected = grpo_advantages([100, 101], [1.0, 0.0])
    assert adv == pytest.approx([expected[0]] * 3 + [expected[1]])
    assert adv[0] == pytest.approx(-adv[3])  # mean over the two rollouts is 0.5, not 0.75


def test_grpo_std_normalization_off_keeps_only_the_centering(kit):
    samples = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    _, adv = normalize_grpo_by_prompt_and_rollout(kit.args(grpo_std_normalization=False), samples)
    assert adv == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_rewards_normalization_off_returns_the_raw_rewards(kit):
    samples = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0, 0.5, 0.0])]
    raw, adv = normalize_grpo_by_prompt_and_rollout(kit.args(rewards_normalization=False), samples)
    assert raw == adv == [1.0, 0.0, 0.5, 0.0]


def test_flags_default_to_on(kit):
    args = kit.args()
    del args.rewards_normalization, args.grpo_std_normalization, args.advantage_estimator
    samples = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    _, adv = normalize_grpo_by_prompt_and_rollout(args, samples)
    assert adv == pytest.approx(grpo_advantages([0, 1, 2, 3], [1.0, 0.0, 0.0, 1.0]))


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [("reinforce_plus_plus", [1.0, 0.0]), ("ppo", [1.0, 0.0]), ("reinforce_plus_plus_baseline", [0.5, -0.5])],
)
def test_estimators_follow_slimes_default(kit, estimator, expected):
    samples = [kit.scored(0, 0, 1.0), kit.scored(0, 1, 0.0)]
    _, adv = normalize_grpo_by_prompt_and_rollout(kit.args(advantage_estimator=estimator), samples)
    assert adv == pytest.approx(expected)


def test_without_group_index_unique_rollouts_are_chunked_by_n(kit):
    samples = [kit.scored(None, i, r) for i, r in enumerate([1.0, 0.0, 1.0, 1.0])]
    _, adv = normalize_grpo_by_prompt_and_rollout(kit.args(n_samples_per_prompt=2), samples)
    assert adv[:2] == pytest.approx(grpo_advantages([0, 1], [1.0, 0.0]))
    assert adv[2:] == [0.0, 0.0]


def test_mixed_group_index_and_bad_chunking_are_refused(kit):
    with pytest.raises(ValueError, match="every sample or on none"):
        normalize_grpo_by_prompt_and_rollout(kit.args(), [kit.scored(0, 0, 1.0), kit.scored(None, 1, 0.0)])
    with pytest.raises(ValueError, match="n_samples_per_prompt=4"):
        normalize_grpo_by_prompt_and_rollout(kit.args(), [kit.scored(None, i, 1.0) for i in range(3)])


def test_missing_reward_is_an_error_not_a_zero(kit):
    sample = kit.scored(0, 0, 1.0)
    sample.reward = None
    with pytest.raises(ValueError, match="no finite reward"):
        normalize_grpo_by_prompt_and_rollout(kit.args(), [sample, kit.scored(0, 1, 0.0)])


# --advantage-estimator choices in slime/utils/arguments.py
SLIME_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo")


def slime_default_post_process(args, rewards: list[float]) -> list[float]:
    """slime's RolloutManager._post_process_rewards (slime/ray/rollout.py), restated in plain Python.

    Centers per chunk of n_samples_per_prompt for grpo / gspo / cispo / reinforce_plus_plus_baseline
    when rewards_normalization; divides by (unbiased std + 1e-6) for grpo / gspo / cispo when
    grpo_std_normalization; other estimators get the raw rewards.
    """
    if args.advantage_estimator not in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline") or not args.rewards_normalization:
        return list(rewards)
    n = args.n_samples_per_prompt
    out = []
    for start in range(0, len(rewards), n):
        chunk = rewards[start : start + n]
        mean = sum(chunk) / len(chunk)
        centered = [r - mean for r in chunk]
        if args.advantage_estimator in ("grpo", "gspo", "cispo") and args.grpo_std_normalization:
            std = math.sqrt(sum(c * c for c in centered) / (len(chunk) - 1))
            centered = [c / (std + 1e-6) for c in centered]
        out += centered
    return out


@pytest.mark.parametrize("estimator", SLIME_ESTIMATORS)
@pytest.mark.parametrize(("normalization", "std"), [(True, True), (True, False), (False, True)])
def test_every_estimator_matches_slimes_default_on_flat_groups(kit, estimator, normalization, std):
    """One segment per rollout, groups in order: exactly what slime's own post-process computes."""
    rewards = [1.0, 0.0, 0.5, 0.0, 0.2, 0.2, 1.0, 0.7, 0.0, 0.0, 0.0, 1.0]
    samples = [kit.scored(i // 4, i, r) for i, r in enumerate(rewards)]
    args = kit.args(advantage_estimator=estimator, rewards_normalization=normalization, grpo_std_normalization=std,
                    n_samples_per_prompt=4)
    raw, adv = normalize_grpo_by_prompt_and_rollout(args, samples)
    assert raw == rewards
    assert adv == pytest.approx(slime_default_post_process(args, rewards), abs=1e-9)


def test_cispo_is_std_normalized_not_raw(kit):
    samples = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    _, adv = normalize_grpo_by_prompt_and_rollout(kit.args(advantage_estimator="cispo"), samples)
    assert adv == pytest.approx(grpo_advantages([0, 1, 2, 3], [1.0, 0.0, 0.0, 0.0]))
    assert adv != [1.0, 0.0, 0.0, 0.0]


def test_a_group_s_importance_weight_multiplies_its_advantages(kit):
    """The skip rule's weight travels in the samples' metadata (``shopsim_weight``) and scales the group's
    advantages; a group without it weighs 1."""
    weighted = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    for sample in weighted:
        sample.metadata["shopsim_weight"] = 2.5
    plain = [kit.scored(1, 4 + i, r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    _, adv = normalize_grpo_by_prompt_and_rollout(kit.args(), weighted + plain)
    expected = grpo_advantages([0, 1, 2, 3], [1.0, 0.0, 0.0, 1.0])
    assert adv[:4] == pytest.approx([2.5 * a for a in expected])
    assert adv[4:] == pytest.approx(expected)


@pytest.mark.parametrize("bad", [0.5, float("nan"), "2", True])
def test_an_importance_weight_that_is_not_a_number_of_at_least_1_is_refused(kit, bad):
    samples = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0])]
    samples[0].metadata["shopsim_weight"] = bad
    with pytest.raises(ValueError, match="shopsim_weight"):
        normalize_grpo_by_prompt_and_rollout(kit.args(), samples)


def test_samples_of_one_group_with_different_weights_are_refused(kit):
    samples = [kit.scored(0, i, r) for i, r in enumerate([1.0, 0.0])]
    samples[0].metadata["shopsim_weight"] = 2.0
    with pytest.raises(ValueError, match="different importance weights"):
        normalize_grpo_by_prompt_and_rollout(kit.args(), samples)
