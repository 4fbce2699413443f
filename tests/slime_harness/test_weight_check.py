"""The ``weight`` check on recorded legs (no slime needed): it fails on advantages without the weight, and never
passes an informative configuration that trained no weighted group."""

from __future__ import annotations

import pytest

from shopsimrl.sampling import grpo_advantages
from shopsimrl.slime.harness.outcome import Status
from shopsimrl.slime.harness.weight_check import check_weights

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]  # two groups of 4: sample indices 0-3 and 4-7


def leg(advantages: list[float], weights: dict[str, float], selection: str = "skip") -> dict:
    return {"status": 0, "args": {"n_samples_per_prompt": 4, "shopsim_selection": selection},
            "trained": {"0": {"sample_indices": list(range(8)), "raw_reward": REWARDS, "advantages": advantages}},
            "weights": weights}


def plain() -> list[float]:
    return grpo_advantages(range(4), REWARDS[:4]) + grpo_advantages(range(4, 8), REWARDS[4:])


def test_advantages_times_the_group_s_weight_pass_and_say_how_many_groups_were_weighted():
    advantages = [2.0 * a for a in plain()[:4]] + plain()[4:]
    outcome = check_weights(leg(advantages, {str(i): 2.0 for i in range(4)}))
    assert outcome.status is Status.PASS and outcome.note.startswith("1 trained group(s)")


def test_advantages_without_the_weight_fail_naming_the_group():
    outcome = check_weights(leg(plain(), {str(i): 2.0 for i in range(4)}))
    assert outcome.status is Status.FAIL
    assert outcome.problems[0].startswith("step 0 group 0 (weight 2)")


def test_samples_of_one_group_drawn_with_different_weights_fail():
    outcome = check_weights(leg(plain(), {"0": 2.0}))
    assert outcome.status is Status.FAIL and "drawn with weights [1.0, 2.0]" in outcome.problems[0]


@pytest.mark.parametrize(("selection", "status"), [("skip", Status.NOT_RUN), ("forecast", Status.NOT_RUN),
                                                 ("seed", Status.PASS)])
def test_an_informative_run_that_trained_no_weighted_group_is_not_a_pass(selection, status):
    assert check_weights(leg(plain(), {}, selection)).status is status


@pytest.mark.parametrize("args", [{"rewards_normalization": False}, {"advantage_estimator": "ppo"}])
def test_a_run_whose_advantages_are_not_grpo_s_is_not_applicable(args):
    recorded = leg(plain(), {})
    recorded["args"].update(args)
    assert check_weights(recorded).status is Status.NOT_APPLICABLE
