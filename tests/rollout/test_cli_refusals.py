"""The CLI refuses bad knobs and options with exit code 2 before any work (no env, no run folder)."""

from __future__ import annotations

import os
import sys

import pytest

from shopsimrl.cli import main as shopsimrl_main
from shopsimrl.commands import rollout as cli


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--over-sampling-batch-size", "8"], "set --over-sampling-batch-size to at least 16"),
        (["--global-batch-size", "60"], "choose a global batch size among"),
        (["--global-batch-size", "12", "--n-samples-per-prompt", "8", "--rollout-batch-size", "3",
          "--over-sampling-batch-size", "6"], "an optimizer update must hold whole groups"),
        (["--max-consecutive-failed-groups", "0"], "argument --max-consecutive-failed-groups: must be a whole number >= 1"),
        (["--rollout-batch-size", "0"], "argument --rollout-batch-size: must be a whole number >= 1"),
        (["--steps", "0"], "argument --steps: must be a whole number within 1..100000, got 0"),
        (["--steps", "100000000000000000000000"], "argument --steps: must be a whole number within 1..100000 (a larger "
                                                  "run would not finish), got 100000000000000000000000"),
        (["--policy", "openai"], "--policy openai needs --openai-base-url URL"),
        (["--fault-rate", "1.5"], "argument --fault-rate: must be a finite number >= 0 and <= 1"),
        (["--episode-concurrency", "0"], "argument --episode-concurrency: must be a whole number within 1..100000"),
        (["--env", "ftp://x"], "argument --env: 'ftp://x' is not an http(s)://host:port URL"),
        (["--openai-model", "m"], "--openai-model: used only by --policy openai"),
        (["--clock", "wall"], "argument --clock: invalid choice: 'wall'"),
        (["--clock", "modelled", "--decode-tokens-per-s", "-5"], "argument --decode-tokens-per-s: must be a finite "
                                                                  "number > 0"),
        (["--clock", "modelled", "--engine-capacity", "0"], "argument --engine-capacity: must be a finite number > 0"),
        (["--engine-capacity", "8"], "--engine-capacity: a constant of the modelled clock; add --clock modelled"),
        (["--learner", "grpo", "--tis-cap", "2"], "--tis-cap corrects the async loop's one-update lag"),
        (["--loop", "async", "--tis-cap", "2"], "--tis-cap weights the GRPO learner's loss: use --learner grpo"),
        (["--loop", "async", "--learner", "grpo", "--tis-cap", "0"], "argument --tis-cap: must be a finite number > 0"),
        (["--loop", "async", "--learner", "grpo", "--resume"], "--loop async cannot be resumed"),
    ],
)
def test_bad_options_exit_2_before_any_work(tmp_path, capsys, no_work, argv, says):
    code = shopsimrl_main(["rollout", "--out", str(tmp_path), "--name", "r", *argv])
    assert code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_foreign_run_folder_is_refused_not_replaced(tmp_path, capsys, no_work):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "notes.txt").write_text("mine")
    assert cli.main(["--out", str(tmp_path), "--name", "r"]) == 2
    assert "does not look like a rollout run" in capsys.readouterr().err
    assert (tmp_path / "r" / "notes.txt").read_text() == "mine"


def test_wandb_missing_is_a_clear_refusal(tmp_path, capsys, no_work, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    assert cli.main(["--out", str(tmp_path), "--name", "r", "--wandb"]) == 2
    assert "pip install 'shopsimrl[wandb]'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
def test_a_non_finite_temperature_is_refused(tmp_path, capsys, no_work, value):
    assert cli.main(["--out", str(tmp_path), "--name", "r", f"--temperature={value}"]) == 2
    assert "argument --temperature: must be a finite number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "x..y", "", "a" * 200])
def test_a_name_must_be_a_plain_name(tmp_path, capsys, no_work, name):
    assert cli.main(["--out", str(tmp_path / "out"), "--name", name]) == 2
    assert "is not a plain name" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


def test_a_file_as_out_is_refused(tmp_path, capsys, no_work):
    (tmp_path / "f").write_text("x")
    assert cli.main(["--out", str(tmp_path / "f"), "--name", "r"]) == 2
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits (tests/faults covers a read-only mount)")
def test_an_unwritable_out_is_refused(tmp_path, capsys, no_work):
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o555)
    assert cli.main(["--out", str(locked / "runs"), "--name", "r"]) == 2
    assert "permission denied" in capsys.readouterr().err


def test_a_finished_run_is_kept_unless_overwrite(tmp_path, capsys, no_work):
    run = tmp_path / "r"
    (run / "step-1").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    assert cli.main(["--out", str(tmp_path), "--name", "r"]) == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert (run / "run.json").exists()


def test_default_names_differ_within_one_second():
    from shopsimrl.rollout.run import default_run_name

    names = {default_run_name() for _ in range(50)}
    assert len(names) > 40  # 16 random bits: a collision in 50 draws is rare; all-equal would mean no suffix
