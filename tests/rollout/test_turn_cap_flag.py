"""``--max-turns`` caps the turns of every episode; its old name ``--max-steps`` still does for one release,
with a message on stderr naming the new flag, and is hidden from ``--help``."""

from __future__ import annotations

import json

import pytest

from shopsimrl.cli import build_parser
from shopsimrl.commands import rollout as cli

SMALL_ARGS = ["--products", "2000", "--rollout-batch-size", "2", "--n-samples-per-prompt", "2",
              "--over-sampling-batch-size", "4", "--global-batch-size", "4", "--view", "plain", "--no-timeline"]
DEPRECATED = "--max-steps is deprecated and will be removed in the next release: use --max-turns"


@pytest.mark.parametrize("flag", ["--max-turns", "--max-steps"])
def test_the_turn_cap_reaches_every_episode(tmp_path, cli_cache, capsys, flag):
    code = cli.main([*SMALL_ARGS, flag, "2", "--out", str(tmp_path), "--name", "r"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (DEPRECATED in captured.err) == (flag == "--max-steps")
    traces = [json.loads(p.read_text()) for p in (tmp_path / "r" / "step-1" / "traces").rglob("*.json")]
    assert traces and all(t["max_turns"] == 2 and len(t["steps"]) <= 2 for t in traces)


def test_the_old_flag_is_hidden_and_a_bad_cap_names_the_new_one(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rollout", "--help"])
    help_text = capsys.readouterr().out
    assert "--max-turns" in help_text and "--max-steps" not in help_text
    assert cli.main(["--max-steps", "0"]) == 2
    err = capsys.readouterr().err
    assert DEPRECATED in err and "--max-turns (turns per episode) must be >= 1, got 0" in err
