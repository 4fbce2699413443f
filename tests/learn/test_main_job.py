"""The learner in the main job: two updates a step at global_batch_size 64, resume, the old flag, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shopsimrl.commands import rollout as cli
from shopsimrl.defaults import STATE_FILE
from shopsimrl.io import append_jsonl, read_jsonl
from shopsimrl.learn.policy import LinearPolicy

BASE = ["--products", "2000", "--view", "plain", "--no-timeline"]


def rollout(tmp_path, name, *argv):
    return cli.main([*BASE, "--out", str(tmp_path), "--name", name, *argv])


def batch(run, k):
    return [{key: v for key, v in row.items() if key != "trace_path"} for row in read_jsonl(run / f"step-{k}" / "batch.jsonl")]


def learned(run, k):
    with np.load(run / f"step-{k}" / STATE_FILE) as data:
        return {key: data[key].tolist() for key in ("theta", "m", "v", "t")}


def learner_metrics(run):
    return [{k: v for k, v in row.items() if k.startswith(("train/", "eval/")) or k == "step"}
            for row in read_jsonl(run / "metrics.jsonl")]


@pytest.mark.parametrize(("global_batch_size", "updates"), [(64, 2), (128, 1)])
def test_one_adam_update_per_global_batch(tmp_path, cli_cache, global_batch_size, updates):
    # the default step keeps 16 groups of 8 episodes: 128 episodes
    assert rollout(tmp_path, "g", "--learner", "grpo", "--global-batch-size", str(global_batch_size)) == 0
    run = tmp_path / "g"
    metrics = json.loads((run / "step-1" / "metrics.json").read_text())
    assert metrics["train/optimizer_updates"] == updates
    assert learned(run, 1)["t"] == updates
    assert sorted({row["update"] for row in batch(run, 1)}) == list(range(updates))
    assert learned(run, 1)["theta"] != LinearPolicy().theta  # it learned something
    assert np.isfinite(metrics["train/loss"]) and metrics["train/grad_norm"] > 0


def test_resume_equals_an_uninterrupted_run(tmp_path, cli_cache):
    # one episode at a time: the in-process env answers from threads, so with several episodes in flight the
    # groups' arrival order (hence which ones are kept) varies between any two runs, resumed or not
    common = ["--learner", "grpo", "--eval-every", "2", "--eval-samples", "1", "--seed", "3", "--episode-concurrency",
              "1", "--rollout-batch-size", "4", "--over-sampling-batch-size", "8", "--n-samples-per-prompt", "4",
              "--global-batch-size", "8"]
    assert rollout(tmp_path, "whole", *common, "--steps", "3") == 0
    assert rollout(tmp_path, "part", *common, "--steps", "2") == 0
    part = tmp_path / "part"
    # a third step that was cut short: a folder without metrics.json, and a stray metrics line
    (part / "step-3" / "traces").mkdir(parents=True)
    (part / "step-3" / "events.jsonl").write_text('{"t": 0, "event": "step_start"}\n')
    append_jsonl(part / "metrics.jsonl", {"step": 3, "rollout/shopsim/success_rate": 0.0})
    assert rollout(tmp_path, "part", *common, "--steps", "3", "--resume") == 0
    whole = tmp_path / "whole"
    for k in (1, 2, 3):
        assert batch(part, k) == batch(whole, k)
        assert learned(part, k) == learned(whole, k)
    assert learner_metrics(part) == learner_metrics(whole)
    assert [row["step"] for row in read_jsonl(part / "metrics.jsonl")] == [1, 2, 3]


def test_resume_refuses_other_settings_and_a_finished_run(tmp_path, cli_cache, capsys):
    assert rollout(tmp_path, "r", "--learner", "grpo", "--steps", "1") == 0
    assert rollout(tmp_path, "r", "--learner", "grpo", "--steps", "2", "--seed", "9", "--resume") == 2
    assert "seed: 0 then, 9 now" in capsys.readouterr().err
    assert rollout(tmp_path, "r", "--learner", "grpo", "--steps", "1", "--resume") == 2
    assert "already has 1 complete steps" in capsys.readouterr().err


def test_the_old_learning_flag_still_works_and_says_what_replaces_it(tmp_path, cli_cache, capsys):
    assert rollout(tmp_path, "old", "--learning") == 0
    err = capsys.readouterr().err
    assert "--learning is deprecated" in err and "use --learner heuristic" in err
    config = json.loads((tmp_path / "old" / "run.json").read_text())
    assert config["learner"] == "heuristic" and config["learning"] is True


@pytest.mark.parametrize(("argv", "message"), [
    (["--eval-every", "5"], "--eval-every: used only with --learner grpo"),
    (["--learner", "grpo", "--eval-every", "0"], "argument --eval-every: must be a whole number >= 1"),
    (["--learner", "grpo", "--resume"], "--resume needs the --name"),
    (["--learner", "grpo", "--temperature", "0.5"], "--temperature"),
    (["--learner", "heuristic", "--name", "x", "--resume"], "--resume: the heuristic learner"),
])
def test_refused_learner_options(tmp_path, capsys, no_work, argv, message):
    assert cli.main([*argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
