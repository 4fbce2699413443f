"""Evaluation samples: traces in their own folder, never overwritten; unscored episodes out of slime's eval mean."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from agent.fakes import TASK, FakeEnv

from shopsimrl.slime.harness.double import rollout as slime_double
from shopsimrl.slime.harness.double.rollout import Sample, slime_args
from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving
from shopsimrl.slime.state import hook_state
from shopsimrl.slime_metrics import drop_unscored_eval_episodes
from shopsimrl.slime_runtime import generate


def slime_rollout_id(monkeypatch, rollout_id: int) -> None:
    """What slime's RolloutManager.eval sets with set_current_rollout_id (slime/rollout/sample_hooks.py), in the
    slime double."""
    if "slime.rollout.sample_hooks" not in sys.modules:
        slime_double.install(monkeypatch)
    monkeypatch.setattr(sys.modules["slime.rollout.sample_hooks"], "_current_rollout_id", rollout_id)


async def test_eval_traces_get_their_own_folder_and_never_overwrite_each_other(tokenizer_dir, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    shop = FakeEnv()
    hook_state().env_client_factory = lambda args: shop
    server = ScriptedSGLang(AutoTokenizer.from_pretrained(tokenizer_dir), lambda body: ("thinking out loud", "length"))
    with serving(server):
        args = slime_args(sglang_router_ip="127.0.0.1", sglang_router_port=server.port, hf_checkpoint=str(tokenizer_dir),
                          shopsim_trace_dir=str(tmp_path / "traces"), sampling_params={})
        params = {"temperature": 0.0, "top_p": 0.7, "top_k": 20, "max_new_tokens": 100}  # eval may sample greedily

        async def eval_episode(index: int) -> Sample:
            sample = Sample(group_index=None, index=index, prompt=TASK.task_id)  # slime's eval samples: no group
            return await generate(args, sample, dict(params), evaluation=True)

        slime_rollout_id(monkeypatch, 10)
        first = [await eval_episode(i) for i in (0, 1)]
        again = await eval_episode(0)  # a second dataset (or pass) whose indices restart at 0
        slime_rollout_id(monkeypatch, 20)
        later = await eval_episode(0)
    paths = [Path(s.metadata["shopsim_trace_path"]) for s in [*first, again, later]]
    root = tmp_path / "traces" / "eval"
    assert paths == [root / "rollout_10" / "t-1" / "sample_0.json", root / "rollout_10" / "t-1" / "sample_1.json",
                     root / "rollout_10" / "t-1" / "sample_0-1.json", root / "rollout_20" / "t-1" / "sample_0.json"]
    assert all(p.is_file() for p in paths)
    assert not (tmp_path / "traces" / "group_None").exists()


def eval_sample(index: int, reward: float | None) -> Sample:
    if reward is None:  # what the generate hook hands back for a technical failure
        return Sample(index=index, reward={"reward": 0.0}, metadata={"shopsim_scored": False},
                      status=Sample.Status.ABORTED, remove_sample=True)
    return Sample(index=index, reward={"reward": reward}, metadata={"shopsim_scored": True},
                  status=Sample.Status.COMPLETED)


def slime_eval_data(rewards: list[float | None]) -> dict:
    """eval_rollout_single_dataset's return value (slime/rollout/sglang_rollout.py)."""
    samples = [eval_sample(i, r) for i, r in enumerate(rewards)]
    return {"shop": {"rewards": [s.reward["reward"] for s in samples],
                     "truncated": [s.status == Sample.Status.TRUNCATED for s in samples], "samples": samples}}


def slime_eval_mean(data: dict, name: str) -> float:
    """log_eval_rollout_data's eval/<name> (slime/observability/rollout_metrics.py)."""
    rewards = data[name]["rewards"]
    return sum(rewards) / len(rewards)


def test_unscored_eval_episodes_are_kept_out_of_slimes_eval_mean():
    data = slime_eval_data([1.0, None, 0.5, 1.0])
    assert slime_eval_mean(data, "shop") == pytest.approx(2.5 / 4)  # what slime would log: the failure as a 0
    metrics: dict = {}
    assert drop_unscored_eval_episodes(3, slime_args(), data, metrics) is False  # slime logs as usual
    assert slime_eval_mean(data, "shop") == pytest.approx(2.5 / 3)
    assert [s.index for s in data["shop"]["samples"]] == [0, 2, 3] and len(data["shop"]["truncated"]) == 3
    assert metrics == {"eval/shop/shopsim_unscored_count": 1, "eval/shop/shopsim_scored_rate": 0.75}


def test_with_passrate_whole_prompts_are_dropped_so_groups_stay_complete():
    data = slime_eval_data([1.0, None, 0.5, 1.0])
    metrics: dict = {}
    drop_unscored_eval_episodes(3, slime_args(log_passrate=True, n_samples_per_eval_prompt=2), data, metrics)
    assert data["shop"]["rewards"] == [0.5, 1.0]  # prompt 0 (episodes 0, 1) had a failure
    assert metrics["eval/shop/shopsim_unscored_count"] == 1


def test_a_dataset_with_no_scored_episode_is_not_logged_as_zero():
    data = slime_eval_data([None, None])
    metrics: dict = {}
    drop_unscored_eval_episodes(3, slime_args(), data, metrics)
    assert "shop" not in data
    assert metrics == {"eval/shop/shopsim_unscored_count": 2, "eval/shop/shopsim_scored_rate": 0.0}
