"""A long run holds no step's report once the step is over, only its summary row: memory stays flat
however many steps run (the figures: benchmarks/bench_memory.py)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from rollout.fakes import SMALL, jittered

from shopsimrl.commands import rollout as cli
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.synthetic import synthetic_runner
from shopsimrl.rollout.view import RolloutView


def test_run_rollout_can_keep_summary_rows_only(tmp_path) -> None:
    seen: list[weakref.ref[Any]] = []
    config = RolloutConfig(knobs=SMALL, steps=3, out=tmp_path, name="r")
    result = asyncio.run(run_rollout(config, synthetic_runner(delay=jittered()), [f"t{i}" for i in range(50)],
                                     on_step=lambda report: seen.append(weakref.ref(report)), keep_reports=False))
    gc.collect()
    assert [ref() for ref in seen] == [None, None, None]
    assert result.reports == [] and [row["step"] for row in result.rows] == [1, 2, 3]


def test_the_cli_lets_each_step_report_go_before_the_next_step(tmp_path, cli_cache, monkeypatch, capsys) -> None:
    finished: list[weakref.ref[Any]] = []
    alive_at_start: list[int] = []
    started, done = RolloutView.step_started, RolloutView.step_finished

    def step_started(self: RolloutView, step: int, target: int) -> None:
        gc.collect()
        alive_at_start.append(sum(ref() is not None for ref in finished))
        started(self, step, target)

    def step_finished(self: RolloutView, report: Any, progress: Any) -> None:
        finished.append(weakref.ref(report))
        done(self, report, progress)

    monkeypatch.setattr(RolloutView, "step_started", step_started)
    monkeypatch.setattr(RolloutView, "step_finished", step_finished)
    code = cli.main(["--steps", "3", "--products", "2000", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4",
                     "--over-sampling-batch-size", "8", "--global-batch-size", "8", "--out", str(tmp_path),
                     "--name", "r", "--view", "plain", "--no-timeline"])
    assert code == 0
    assert alive_at_start == [0, 0, 0]
    assert "rollout steps" in capsys.readouterr().out  # the summary table, drawn from the rows
