"""``ASYNC=1``: the launcher runs slime's ``train_async.py`` (rollout k+1 while step k trains), and refuses,
in one line and before anything starts, what that loop refuses.

- ``COLOCATE=1``: slime's ``train_async.py`` asserts ``not args.colocate`` (slime 624b824);
- a slime checkout without ``train_async.py`` (an older slime);
- otherwise the command it prints (``--dry-run``, ``DRY_RUN=1`` in the scripts) runs ``train_async.py``
  with the same arguments ``train.py`` gets, but for slime's own data source (``SELECTION=seed WAVES=fixed``),
  replaced by its subclass that saves the state as of each rollout's end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shopsimrl.cli import main
from shopsimrl.defaults import SLIME_ORDER_DATA_SOURCE_PATH
from shopsimrl.slime.launch import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
SEPARATE_GPUS = {"COLOCATE": "0", "ROLLOUT_NUM_GPUS": "2"}


def slime_tree(root: Path, *scripts: str) -> Path:
    root.mkdir()
    for script in scripts:
        (root / script).write_text("")
    return root


def dry_run(monkeypatch, capsys, tmp_path, **env: str) -> tuple[int, str, str]:
    for name in ("ASYNC", "COLOCATE", "ROLLOUT_NUM_GPUS", "SLIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "run"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["train", "--dry-run"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_async_with_colocated_gpus_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    code, out, err = dry_run(monkeypatch, capsys, tmp_path, ASYNC="1")  # COLOCATE defaults to 1
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert "train_async.py" in err and "COLOCATE=0" in err


def test_async_with_a_slime_that_has_no_async_loop_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    old = slime_tree(tmp_path / "slime", "train.py")
    code, out, err = dry_run(monkeypatch, capsys, tmp_path, ASYNC="1", SLIME_DIR=str(old), **SEPARATE_GPUS)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and f"SLIME_DIR={old} does not have" in err


@pytest.mark.parametrize("selection", ["seed", "skip"])
@pytest.mark.parametrize(("asynchronous", "script"), [("1", "train_async.py"), ("0", "train.py")])
def test_the_printed_command_runs_the_chosen_loop_with_the_same_arguments(monkeypatch, capsys, tmp_path, asynchronous,
                                                                          script, selection):
    """The loop changes, the arguments do not; but one: where train.py runs slime's own data source (seed order,
    fixed waves), train_async.py runs its subclass that saves the state as of each rollout's end."""
    slime = slime_tree(tmp_path / "slime", "train.py", "train_async.py")
    code, out, _ = dry_run(monkeypatch, capsys, tmp_path, ASYNC=asynchronous, SLIME_DIR=str(slime), SELECTION=selection,
                           **SEPARATE_GPUS)
    assert code == 0
    words = out.split()
    at = words.index(str(slime / script))
    config = TrainConfig.from_env({"SLIME_DIR": str(slime), "RUN_DIR": str(tmp_path / "run"), "SELECTION": selection,
                                   **SEPARATE_GPUS})
    expected = config.train_args()
    if asynchronous == "1" and selection == "seed":
        assert "--data-source-path" not in expected
        assert words[at + 1:].count("--data-source-path") == 1
        at_flag = words.index("--data-source-path")
        assert words[at_flag + 1] == SLIME_ORDER_DATA_SOURCE_PATH
        del words[at_flag:at_flag + 2]
    assert words[at + 1:] == expected
    assert str(slime / ("train.py" if script == "train_async.py" else "train_async.py")) not in out


def test_the_launch_script_passes_async_through(tmp_path):
    slime = slime_tree(tmp_path / "slime", "train.py", "train_async.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "ROLLOUT_", "GLOBAL_", "OVER_"))}
    env.update(SHOPSIMRL_PYTHON=sys.executable, RUN_DIR=str(tmp_path / "run"), MODEL_ARGS_SCRIPT=str(tmp_path / "none.sh"),
               DRY_RUN="1", ASYNC="1", SLIME_DIR=str(slime), **SEPARATE_GPUS)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "run_shopsimrl_slime.sh")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{slime / 'train_async.py'} --hf-checkpoint" in done.stdout
    env.update(COLOCATE="1")
    refused = subprocess.run(["bash", str(ROOT / "scripts" / "run_shopsimrl_slime.sh")], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=120)
    assert refused.returncode == 2 and "refuses colocation" in refused.stderr
