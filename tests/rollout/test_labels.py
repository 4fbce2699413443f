"""One group-label vocabulary and one rule, shared by triage and measurement (rollout.group.classify).

The label refines the filter's verdict and never contradicts it: ``varied`` is exactly
"rewards spread by more than 1e-6" (kept), ``technical`` exactly "some sibling unscored".
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.rollout.group import CLASSIFICATIONS, EpisodeSpec, GroupRun, classify, never_succeeded
from shopsimrl.sampling import Verdict, group_verdict


def episode(i: int, reward: float | None, success: float | None = None) -> EpisodeResult:
    if reward is None:
        return EpisodeResult.failed(task_id="t", rollout_id=f"r{i}", seed=i,
                                    error={"stage": "step", "type": "EnvError", "message": "down"})
    return EpisodeResult(task_id="t", rollout_id=f"r{i}", seed=i, scored=True, reward=reward,
                         success=float(reward == 1.0) if success is None else success, strict_reward=reward,
                         end_reason="purchase", error=None, turns=3, env_steps=3, wall_seconds=0.0)


def label(rewards: list[float | None]) -> tuple[Verdict, str]:
    group = GroupRun(index=0, wave=1, task_id="t",
                     specs=[EpisodeSpec("t", f"r{i}", i, None, 0, i) for i in range(len(rewards))])
    group.episodes = [episode(i, r) for i, r in enumerate(rewards)]
    verdict = group_verdict(group.samples())
    return verdict, classify(verdict, group.episodes)


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([1.0] * 8, "all_correct"),
        ([0.0] * 8, "all_wrong"),
        ([0.5] * 8, "same_partial"),  # the same wrong colour every time: zero spread, reward 0.5
        ([0.3, 0.5], "varied"),  # no success, but spread: the filter keeps it, so it is varied
        ([0.5] * 7 + [1.0], "varied"),
        ([0.0, 1.5e-6], "varied"),  # just over the 1e-6 tolerance
        ([0.0, 5e-7], "all_wrong"),  # within it: zero-std, common reward 0
        ([1.0] * 7 + [None], "technical"),
        ([0.0] * 7 + [None], "technical"),
    ],
)
def test_the_label_refines_the_filter_verdict(rewards: list[float | None], expected: str) -> None:
    verdict, got = label(rewards)
    assert got == expected
    assert got in CLASSIFICATIONS
    if verdict is not Verdict.ZERO_STD:
        assert got == verdict.value  # never contradicts the filter
    else:
        assert got in ("all_correct", "all_wrong", "same_partial")


def test_the_failure_queue_takes_every_fully_scored_group_without_a_success_whatever_its_label() -> None:
    assert never_succeeded([episode(0, 0.3), episode(1, 0.5)])  # varied
    assert never_succeeded([episode(i, 0.5) for i in range(4)])  # same_partial
    assert never_succeeded([episode(i, 0.0) for i in range(4)])  # all_wrong
    assert not never_succeeded([episode(0, 0.0), episode(1, 1.0)])
    assert not never_succeeded([episode(0, 0.0), episode(1, None)])  # technical: nothing to analyse
    assert not never_succeeded([])


def test_a_failed_runner_is_an_unscored_record_with_its_error() -> None:
    failed = EpisodeResult.failed(task_id="t", rollout_id="r", seed=1, error={"stage": "runner", "type": "KeyError",
                                  "message": "x"}, env_steps=2, wall_seconds=0.5)
    assert not failed.scored and failed.reward is None and failed.success is None and failed.strict_reward is None
    assert failed.end_reason == "runner_error" and failed.policy is None and failed.env_steps == 2
    assert failed.as_dict()["error"]["stage"] == "runner"


@given(st.lists(st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0.0, 1.0)), min_size=1, max_size=8))
def test_the_label_never_contradicts_the_verdict(rewards: list[float | None]) -> None:
    verdict, got = label(rewards)
    expected = {Verdict.TECHNICAL: {"technical"}, Verdict.VARIED: {"varied"},
                Verdict.ZERO_STD: {"all_correct", "all_wrong", "same_partial"}}[verdict]
    assert got in expected
