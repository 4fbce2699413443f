"""--resume's pieces: the last complete step, the seed order replayed from the recorded waves."""

from __future__ import annotations

import pytest

from shopsimrl.io import append_jsonl
from shopsimrl.learn.resume import ResumeError, completed_steps, replay_seed_order
from shopsimrl.sampling.modes import Strategy
from shopsimrl.sampling.source import prompt_source

TASKS = [f"t{i}" for i in range(10)]
N = 8


def record_waves(root, waves_per_step, seed=0, tamper=False):
    """Run the seed order as a run would (each wave's prompts, all out of flight at the step's end)."""
    order = prompt_source(Strategy.SEED, TASKS, N, seed)
    for k, waves in enumerate(waves_per_step, start=1):
        step = root / f"step-{k}"
        started = []
        for w, n in enumerate(waves, start=1):
            taken = [str(t) for t in order.next_prompts(n)]
            started.extend(taken)
            if tamper and k == len(waves_per_step):
                taken = list(reversed(taken))
            append_jsonl(step / "events.jsonl", {"t": 0, "event": "wave", "wave": w, "task_ids": taken})
        for t in started:
            order.release(t)
        (step / "metrics.json").write_text("{}")
    return order


def test_the_replayed_order_continues_where_the_run_stood(tmp_path):
    original = record_waves(tmp_path, [[4], [4, 2], [4]])
    assert completed_steps(tmp_path) == 3
    replayed = replay_seed_order(tmp_path, 3, TASKS, N, seed=0)
    assert replayed.state_dict() == original.state_dict()
    assert replayed.next_prompts(6) == original.next_prompts(6)


def test_a_wave_that_does_not_replay_refuses_the_resume(tmp_path):
    record_waves(tmp_path, [[4], [4]], tamper=True)
    with pytest.raises(ResumeError, match="step 2 wave 1"):
        replay_seed_order(tmp_path, 2, TASKS, N, seed=0)


def test_a_step_without_metrics_is_not_complete(tmp_path):
    record_waves(tmp_path, [[4], [4]])
    (tmp_path / "step-2" / "metrics.json").unlink()
    assert completed_steps(tmp_path) == 1
