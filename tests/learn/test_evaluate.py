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


class _Splits:
    async def list_tasks(self, split):
        return {"val": ["v1", "v2"], "test": ["t1"], "train": ["x"]}[split]


async def test_eval_split_val_plus_test_evaluates_both_held_out_splits_val_first():
    from shopsimrl.learn.evaluate import eval_task_ids

    assert await eval_task_ids(_Splits(), "val") == ["v1", "v2"]
    assert await eval_task_ids(_Splits(), "val+test") == ["v1", "v2", "t1"]
    with pytest.raises(ValueError, match="val, val\\+test"):
        await eval_task_ids(_Splits(), "train")


def test_success_by_task_reads_one_mode_and_skips_unscored_episodes():
    from shopsimrl.learn.evaluate import success_by_task

    episodes = [{"mode": "sampled", "task_id": "a", "scored": True, "success": 1.0},
                {"mode": "sampled", "task_id": "a", "scored": True, "success": 0.0},
                {"mode": "sampled", "task_id": "b", "scored": False, "success": None},
                {"mode": "greedy", "task_id": "a", "scored": True, "success": 1.0}]
    assert success_by_task({"episodes": episodes}) == {"a": 0.5}
    assert success_by_task({"episodes": episodes}, "greedy") == {"a": 1.0}


def test_saved_parameters_evaluate_as_the_run_did(cli_cache, tmp_path):
    """evaluate_parameters plays the run's eval episodes (same seeds): the untrained parameters give the success
    the run logged before training."""
    import asyncio
    import json

    from shopsimrl.cli import main
    from shopsimrl.env import InProcessEnvClient
    from shopsimrl.env.core import load_env
    from shopsimrl.learn.evaluate import evaluate_parameters
    from shopsimrl.learn.params import LAYOUT
    from tests.learn.conftest import CATALOG_SEED, PRODUCTS

    out = tmp_path / "runs"  # not in the catalog cache, which every worker of the run shares
    assert main(["rollout", "--learner", "grpo", "--eval-every", "1", "--eval-samples", "2", "--eval-split",
                 "val+test", "--steps", "1", "--products", str(PRODUCTS), "--seed", "5", "--out", str(out),
                 "--name", "r", "--no-timeline", "--view", "plain", "--episode-concurrency", "1"]) == 0
    row = json.loads((out / "r" / "metrics.jsonl").read_text().splitlines()[0])

    async def evaluate_untrained():
        client = InProcessEnvClient(load_env(PRODUCTS, CATALOG_SEED, cli_cache, slots=8), owns_env=True)
        try:
            held_out = await client.list_tasks("val") + await client.list_tasks("test")
            return held_out, *await evaluate_parameters(LAYOUT.initial(), client, held_out, seed=5, samples=2)
        finally:
            await client.aclose()

    held_out, metrics, record = asyncio.run(evaluate_untrained())
    assert record["tasks"] == len(held_out) == 40  # val and test of the 2,000-product catalog
    assert metrics["eval/shopsim/success_rate"] == row["eval/shopsim/success_rate"]
    assert json.loads((out / "r" / "run.json").read_text())["eval_split"] == "val+test"
