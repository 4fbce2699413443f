"""The skip rule's former name, ``informative``, still names it wherever a user or an old run folder writes it."""

from __future__ import annotations

import pytest

from shopsimrl.cli import build_parser
from shopsimrl.sampling.modes import Selection
from shopsimrl.sampling.source import new_selector, selector_from_state
from shopsimrl.slime.launch_knobs import TrainKnobs


def test_the_former_name_parses_to_the_skip_rule() -> None:
    assert Selection("informative") is Selection.SKIP and Selection.parse("informative") is Selection.SKIP
    with pytest.raises(ValueError, match="selection must be one of seed, skip, spread, forecast"):
        Selection.parse("greedy")


def test_the_command_line_takes_the_former_name() -> None:
    args = build_parser().parse_args(["rollout", "--selection", "informative"])
    assert args.selection is Selection.SKIP


def test_a_launch_with_the_former_name_runs_the_skip_rule() -> None:
    knobs = TrainKnobs.from_env({"SELECTION": "informative"})
    assert knobs.selection is Selection.SKIP


def test_a_checkpoint_written_under_the_former_name_restores_the_skip_rule() -> None:
    source = new_selector("skip", ["a", "b", "c"], 4, 0)
    state = source.state_dict()
    state["strategy"] = "informative"
    restored = selector_from_state(state)
    assert restored.state_dict()["strategy"] == "skip"
    assert restored.next_prompts(2) == source.next_prompts(2)
