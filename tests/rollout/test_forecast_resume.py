"""--resume with the ``forecast`` rule: the forecast is saved with the run's other selection state, so a resumed run
equals the uninterrupted one; a forecast fitted on other instructions (an env serving another catalog under the same
task ids) is refused in one line, before any step runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shopsimrl.io import read_jsonl
from shopsimrl.learn import resume
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.outputs import prepare_run_dir
from shopsimrl.rollout.run import run_record
from shopsimrl.rollout.synthetic import synthetic_runner, task_difficulty_outcome
from shopsimrl.sampling import SamplingKnobs
from shopsimrl.sampling.forecast import ForecastStateError
from shopsimrl.sampling.modes import Selection, WaveMode

KNOBS = SamplingKnobs(rollout_batch_size=4, n_samples_per_prompt=4, over_sampling_batch_size=8,
                      global_batch_size=8, max_consecutive_failed_groups=100)
TASKS = [f"t{i:03d}" for i in range(60)]
TEXTS = {t: {"instruction": f"Find me {'hard' if i % 2 else 'easy'} shoes", "category": f"c{i % 3}"}
         for i, t in enumerate(TASKS)}
TIMED = ("seconds", "per_second")


def run(out: Path, name: str, steps: int, descriptions, *, resuming: bool = False) -> Path:
    cfg = RolloutConfig(knobs=KNOBS, steps=steps, seed=3, out=out, name=name, episode_concurrency=1,
                        selection=Selection.FORECAST, waves=WaveMode.ADAPTIVE)
    paths = prepare_run_dir(out, name, resume=resuming)
    try:
        point = resume.prepare(paths, run_record(cfg, len(TASKS)), TASKS) if resuming else None
        asyncio.run(run_rollout(cfg, synthetic_runner(task_difficulty_outcome), TASKS, paths=paths,
                                descriptions=descriptions, resume=point))
    finally:
        paths.unlock()
    return paths.root


def rows(root: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMED)} for r in read_jsonl(root / "metrics.jsonl")]


def test_a_resumed_forecast_run_equals_the_uninterrupted_one_and_other_texts_are_refused(tmp_path):
    whole = run(tmp_path, "whole", 4, TEXTS)
    run(tmp_path, "part", 2, TEXTS)
    part = run(tmp_path, "part", 4, TEXTS, resuming=True)
    assert rows(part) == rows(whole)
    assert any("rollout/shopsim/selector/forecast/brier" in r for r in rows(part))
    assert (part / "step-4" / "state.json").read_bytes() == (whole / "step-4" / "state.json").read_bytes()
    other = {t: {**d, "instruction": "Buy socks"} for t, d in TEXTS.items()}
    with pytest.raises(ForecastStateError, match="other prompts or other prompt texts and labels") as refused:
        run(tmp_path, "part", 5, other, resuming=True)
    assert "\n" not in str(refused.value)
    assert [r["step"] for r in read_jsonl(part / "metrics.jsonl")] == [1, 2, 3, 4]  # nothing ran
