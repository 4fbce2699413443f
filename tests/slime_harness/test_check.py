"""``shopsimrl slime check`` names what does not fit: a path that is no slime, a slime function whose signature moved."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from shopsimrl.cli import main


def test_a_path_that_is_not_slime_is_refused(tmp_path, capsys):
    assert main(["slime", "check", "--slime-src", str(tmp_path)]) == 2
    assert "is not a slime checkout" in capsys.readouterr().err


def surface(src) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "shopsimrl.slime.harness.surface", str(src)],
                         capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_surface_check_names_a_changed_signature(slime_src, tmp_path):
    assert surface(slime_src) == []
    copy = tmp_path / "slime"
    shutil.copytree(slime_src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "slime" / "rollout" / "sglang_rollout.py"
    text = module.read_text()
    assert "async def abort(args: Namespace, rollout_id: int)" in text
    module.write_text(text.replace("async def abort(args: Namespace, rollout_id: int)",
                                   "async def abort(args: Namespace, step: int)"))
    problems = surface(copy)
    assert problems == ["slime.rollout.sglang_rollout.abort: signature changed: (args, step), "
                        "ShopSim passes (args, rollout_id)"]
