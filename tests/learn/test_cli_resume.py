"""``shopsimrl rollout --resume`` as a user runs it: a selector and adaptive waves, and injected faults, resumed to the
uninterrupted run, a parameter update gone NaN stopped before it is written, and one piece of advice for a folder without run.json."""

from __future__ import annotations

import json

import numpy as np

from shopsimrl.commands import rollout as cli
from shopsimrl.defaults import STATE_FILE
from shopsimrl.io import read_jsonl
from shopsimrl.rollout.journal import MARKER

COMMON = ["--products", "2000", "--view", "plain", "--no-timeline", "--learner", "grpo", "--eval-every", "2",
          "--eval-samples", "1", "--seed", "3", "--episode-concurrency", "1", "--rollout-batch-size", "4",
          "--over-sampling-batch-size", "8", "--n-samples-per-prompt", "4", "--global-batch-size", "8"]
TIMED = ("seconds", "per_second")


def rollout(tmp_path, name, *argv):
    return cli.main([*COMMON, "--out", str(tmp_path), "--name", name, *argv])


def untimed(root):
    return [{k: v for k, v in row.items() if not any(t in k for t in TIMED)} for row in read_jsonl(root / "metrics.jsonl")]


def batch(root, k):
    return [{key: v for key, v in row.items() if key != "trace_path"} for row in read_jsonl(root / f"step-{k}" / "batch.jsonl")]


def test_a_selector_with_adaptive_waves_resumes_to_the_uninterrupted_run(tmp_path, cli_cache):
    modes = ["--selection", "skip", "--waves", "adaptive"]
    assert rollout(tmp_path, "whole", *modes, "--steps", "3") == 0
    for steps in ("1", "2", "3"):
        assert rollout(tmp_path, "part", *modes, "--steps", steps, *(["--resume"] if steps != "1" else [])) == 0
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert untimed(part) == untimed(whole)
    assert [row["step"] for row in read_jsonl(part / "metrics.jsonl")] == [1, 2, 3]
    for k in (1, 2, 3):
        assert batch(part, k) == batch(whole, k)
        assert (part / f"step-{k}" / "state.json").read_bytes() == (whole / f"step-{k}" / "state.json").read_bytes()


def test_a_run_with_injected_faults_resumes_to_the_uninterrupted_run(tmp_path, cli_cache):
    faults = ["--fault-rate", "0.02", "--eval-every", "5"]
    assert rollout(tmp_path, "whole", *faults, "--steps", "2") == 0
    assert rollout(tmp_path, "part", *faults, "--steps", "1") == 0
    assert rollout(tmp_path, "part", *faults, "--steps", "2", "--resume") == 0
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert untimed(part) == untimed(whole)
    injected = sorted(p.name for k in (1, 2) for p in (whole / f"step-{k}" / "traces").glob("*.json")
                      if "injected_fault" in p.read_text())
    assert injected  # faults were drawn, and the resumed run drew the same ones
    assert injected == sorted(p.name for k in (1, 2) for p in (part / f"step-{k}" / "traces").glob("*.json")
                              if "injected_fault" in p.read_text())
    for k in (1, 2):
        assert batch(part, k) == batch(whole, k)


def test_an_update_that_makes_the_parameters_nan_stops_the_step_before_it_is_written(tmp_path, cli_cache, capsys,
                                                                                    monkeypatch):
    from shopsimrl.learn import learner

    real_train = learner.train

    def diverging(theta, adam, updates, global_batch_size, **options):
        new, metrics = real_train(theta, adam, updates, global_batch_size, **options)
        return np.full_like(new, np.nan), metrics

    monkeypatch.setattr(learner, "train", diverging)
    assert rollout(tmp_path, "nan", "--steps", "2") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "the parameters NaN or infinite" in err and "step-1/policy.npz" in err
    step = tmp_path / "nan" / "step-1"
    assert not (step / MARKER).exists() and not (step / STATE_FILE).exists() and not (step / "metrics.json").exists()
    monkeypatch.undo()
    assert rollout(tmp_path, "nan", "--steps", "2", "--resume") == 0  # resumable: the step runs again
    assert [row["step"] for row in read_jsonl(tmp_path / "nan" / "metrics.jsonl")] == [1, 2]


def test_a_step_folder_without_run_json_gets_the_same_advice_from_a_start_and_a_resume(tmp_path, cli_cache, capsys):
    assert rollout(tmp_path, "r", "--steps", "1") == 0
    (tmp_path / "r" / "run.json").unlink()
    assert rollout(tmp_path, "r", "--steps", "2") == 2
    start = capsys.readouterr().err
    assert rollout(tmp_path, "r", "--steps", "2", "--resume") == 2
    resumed = capsys.readouterr().err
    for err in (start, resumed):
        assert "--overwrite" in err and len(err.strip().splitlines()) == 1, err
    assert "drop --resume" not in resumed
    assert rollout(tmp_path, "r", "--steps", "1", "--overwrite") == 0  # the advice works
    assert json.loads((tmp_path / "r" / "run.json").read_text())["steps"] == 1
