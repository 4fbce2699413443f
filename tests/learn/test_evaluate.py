"""Held-out evaluation follows slime's eval rules: unscored episodes are counted, never averaged."""

from __future__ import annotations

import pytest

from shopsimrl.agent.result import EpisodeResult
from shopsimrl.learn.evaluate import EVAL_PREFIX, eval_metrics, evaluate
from shopsimrl.learn.policy import LinearPolicy


def scored(task: str, success: float, reward: float) -> EpisodeResult:
    return EpisodeResult(task_id=task, rollout_id=task, seed=0, scored=True, reward=reward, success=success,
                         strict_reward=reward, end_reason="purchase", error=None, turns=3, env_steps=3,
                         wall_seconds=0.0)


def unscored(task: str) -> EpisodeResult:
    return EpisodeResult.failed(task_id=task, rollout_id=task, seed=0, error={"stage": "reset"})


def test_eval_excludes_unscored_episodes_from_the_means():
    results = [scored("a", 1.0, 1.0), scored("b", 0.0, 0.5), unscored("c"), unscored("d")]
    metrics = eval_metrics(results)
    assert metrics[EVAL_PREFIX + "success_rate"] == 0.5  # 1 of the 2 scored, not 1 of 4
    assert metrics[EVAL_PREFIX + "reward_mean"] == 0.75
    assert metrics[EVAL_PREFIX + "unscored_count"] == 2 and metrics[EVAL_PREFIX + "scored_rate"] == 0.5


def test_eval_with_no_scored_episode_logs_no_mean():
    metrics = eval_metrics([unscored("a")])
    assert EVAL_PREFIX + "success_rate" not in metrics and EVAL_PREFIX + "reward_mean" not in metrics
    assert metrics[EVAL_PREFIX + "unscored_count"] == 1


async def test_evaluate_plays_greedy_and_sampled_and_a_raising_runner_is_unscored():
    calls = []

    def make_runner(policy):
        async def run(spec, meter):
            calls.append((policy.greedy, spec.task_id, spec.seed))
            if spec.task_id == "broken":
                raise ConnectionError("env down")
            return scored(spec.task_id, 1.0 if policy.greedy else 0.0, 0.5)
        return run

    metrics, record = await evaluate(LinearPolicy(), make_runner, ["t1", "t2", "broken"], samples=3)
    assert sum(1 for g, *_ in calls if g) == 3 and sum(1 for g, *_ in calls if not g) == 9
    assert metrics[EVAL_PREFIX + "success_rate"] == 0.0 and metrics[EVAL_PREFIX + "unscored_count"] == 3
    assert metrics[EVAL_PREFIX + "greedy/success_rate"] == 1.0
    assert metrics[EVAL_PREFIX + "greedy/scored_rate"] == pytest.approx(2 / 3)
    assert len(record["episodes"]) == 12
    again = []
    await evaluate(LinearPolicy(), lambda p: _recorder(again), ["t1", "t2", "broken"],
                   samples=3)
    assert [c[1:] for c in calls] == again  # the same seeds at every evaluation


def _recorder(into):
    async def run(spec, meter):
        into.append((spec.task_id, spec.seed))
        return scored(spec.task_id, 1.0, 1.0)
    return run
