"""``make demo`` can be run again and again: each demo replaces the previous one in runs/demo."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from rollout.conftest import PRODUCTS

from shopsimrl.commands import rollout as cli

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def demo_arguments() -> list[str]:
    """The arguments the Makefile's demo recipe passes to ``shopsimrl rollout``."""
    recipe = re.search(r"^demo:.*\n\t\S*shopsimrl rollout (.*)$", MAKEFILE.read_text(), flags=re.M)
    assert recipe, "no `shopsimrl rollout` line under the Makefile's demo target"
    return shlex.split(recipe.group(1))


def test_the_demo_recipe_runs_twice_in_a_row(tmp_path: Path, cli_cache: Path) -> None:
    argv = [*demo_arguments(), "--out", str(tmp_path), "--products", str(PRODUCTS), "--steps", "1", "--view", "plain"]
    assert cli.main(argv) == 0
    first = (tmp_path / "demo" / "run.json").stat().st_mtime_ns
    assert cli.main(argv) == 0  # a second demo replaces the first instead of being refused
    assert (tmp_path / "demo" / "run.json").stat().st_mtime_ns >= first
    assert sorted(p.name for p in (tmp_path / "demo").glob("step-*")) == ["step-1"]
