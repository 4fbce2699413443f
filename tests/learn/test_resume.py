"""--resume's pieces: the last complete step, the sampler replayed from the recorded waves."""

from __future__ import annotations

import pytest

from shopsimrl.io import append_jsonl
from shopsimrl.learn.resume import ResumeError, completed_steps, replay_sampler
from shopsimrl.rollout.tasks import TaskSampler

TASKS = [f"t{i}" for i in range(10)]


def record_waves(root, waves_per_step, seed=0, tamper=False):
    sampler = TaskSampler(TASKS, seed=seed)
    for k, waves in enumerate(waves_per_step, start=1):
        sampler.begin_step()
        step = root / f"step-{k}"
        for w, n in enumerate(waves, start=1):
            taken = sampler.take(n)
            if tamper and k == len(waves_per_step):
                taken = list(reversed(taken))
            append_jsonl(step / "events.jsonl", {"t": 0, "event": "wave", "wave": w, "task_ids": taken})
        (step / "metrics.json").write_text("{}")
    return sampler


def test_the_replayed_sampler_continues_where_the_run_stood(tmp_path):
    original = record_waves(tmp_path, [[4], [4, 2], [4]])
    assert completed_steps(tmp_path) == 3
    replayed = replay_sampler(tmp_path, 3, TASKS, seed=0)
    assert replayed.state() == original.state()
    original.begin_step()
    replayed.begin_step()
    assert replayed.take(6) == original.take(6)


def test_a_wave_that_does_not_replay_refuses_the_resume(tmp_path):
    record_waves(tmp_path, [[4], [4]], tamper=True)
    with pytest.raises(ResumeError, match="step 2 wave 1"):
        replay_sampler(tmp_path, 2, TASKS, seed=0)


def test_a_step_without_metrics_is_not_complete(tmp_path):
    record_waves(tmp_path, [[4], [4]])
    (tmp_path / "step-2" / "metrics.json").unlink()
    assert completed_steps(tmp_path) == 1
