"""The live view and the summary table render every column, on a terminal and as plain lines."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console
from rollout.fakes import SMALL, jittered

from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.synthetic import synthetic_runner
from shopsimrl.rollout.view import SUMMARY_COLUMNS, WAVE_COLUMNS, RolloutView


def _run(tmp_path, *, live: bool) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=live, width=200, color_system=None)
    with RolloutView(console, live=live) as view:
        config = RolloutConfig(knobs=SMALL, steps=2, out=tmp_path, name="view")
        result = asyncio.run(run_rollout(config, synthetic_runner(delay=jittered()), [f"t{i}" for i in range(50)],
                                         observer=view))
        view.summary(result.reports)
    return buffer.getvalue()


def test_live_view_shows_every_wave_column_and_the_summary(tmp_path):
    out = _run(tmp_path, live=True)
    for title, _ in WAVE_COLUMNS:
        assert title in out
    for title, _key, _fmt in SUMMARY_COLUMNS:
        assert title in out
    assert "kept 4/4" in out


def test_plain_view_logs_waves_and_step_ends(tmp_path):
    out = _run(tmp_path, live=False)
    assert "step 1 wave 1: submitted 8 groups" in out
    assert "step 2 done in" in out
    assert "\x1b[" not in out  # no cursor movement or colors when not a terminal
    for title, _key, _fmt in SUMMARY_COLUMNS:
        assert title in out
