"""The modelled GPU clock of the main job: modelled-time order, aborts cut at the modelled moment, the loop's figures."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from rollout.fakes import SMALL, load_events, read_json

from shopsimrl.io import read_jsonl
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.gputime import Clock, TimeModel
from shopsimrl.rollout.loops import CLOCK_PREFIX, TrainingLoop, async_schedule, sync_schedule
from shopsimrl.rollout.synthetic import synthetic_runner, unit_hash
from shopsimrl.sampling.metrics import PREFIX

MODEL = TimeModel(capacity=8.0)


def modelled_seconds(seed: int, turns: int = 5) -> float:
    return MODEL.episode(seed, turns, ()).solo_seconds


def every_group_varied(spec):
    return True, float(spec.sibling % 2)


def run(tmp_path: Path, *, steps: int = 2, delay=None, loop: TrainingLoop = TrainingLoop.SYNC, name: str = "run",
        outcome=None):
    config = RolloutConfig(knobs=SMALL, steps=steps, out=tmp_path, name=name, clock=Clock.MODELLED, loop=loop,
                           time_model=MODEL)
    runner = synthetic_runner(delay=delay or (lambda spec: unit_hash("delay", spec.seed) * 0.004),
                              **({"outcome": outcome} if outcome else {}))
    return asyncio.run(run_rollout(config, runner, [f"task-{i:04d}" for i in range(200)]))


def test_groups_are_decided_in_modelled_time_order_whatever_order_the_machine_finishes_them(tmp_path):
    # the machine finishes the groups in the reverse of their modelled order: the longest modelled episode is
    # the quickest one here
    slowest_first = run(tmp_path, delay=lambda spec: 0.02 / modelled_seconds(spec.seed), name="reverse")
    events = load_events(slowest_first.paths.step(1).root)
    decisions = [e for e in events if e["event"] == "decision"]
    times = [e["t"] for e in decisions]
    assert times == sorted(times)
    report = slowest_first.reports[0]
    for e in decisions:  # each group is decided when its slowest sibling ends on the modelled clock
        group = report.groups[e["index"]]
        assert e["t"] == round(max(m.seconds for m in group.meters), 6)


def test_two_runs_with_different_machine_timing_give_identical_outputs(tmp_path):
    a = run(tmp_path, name="a", delay=lambda spec: unit_hash("a", spec.seed) * 0.01)
    b = run(tmp_path, name="b", delay=lambda spec: unit_hash("b", spec.seed) * 0.01)
    for k in (1, 2):
        assert load_events(a.paths.step(k).root) == load_events(b.paths.step(k).root)
        assert read_json(a.paths.step(k).metrics) == read_json(b.paths.step(k).metrics)
        assert list(read_jsonl(a.paths.step(k).batch)) == list(read_jsonl(b.paths.step(k).batch))


def test_an_abort_cuts_each_episode_in_flight_at_the_modelled_moment(tmp_path):
    result = run(tmp_path, steps=1, outcome=every_group_varied)
    report = result.reports[0]
    assert report.aborted, "the first 4 of 8 informative groups fill the batch: the rest are aborted"
    abort = next(e for e in load_events(result.paths.step(1).root) if e["event"] == "abort")
    assert abort["t"] == round(report.wall_seconds, 6)
    for index in report.aborted:
        group = report.groups[index]
        assert group.episodes == [] and group.verdict is None  # never came back
        started = next(e["t"] for e in load_events(result.paths.step(1).root)
                       if e["event"] == "wave" and e["first_index"] <= index <= e["last_index"])
        for meter in group.meters:
            assert math.isclose(meter.seconds, abort["t"] - started, abs_tol=1e-6)  # its cost counts up to the cut
            assert meter.env_steps <= 5
    metrics = report.metrics
    assert metrics[PREFIX + "waste/episode_seconds_aborted"] > 0
    assert metrics[PREFIX + "waste/env_steps_aborted"] < 5 * metrics[PREFIX + "waste/episodes_aborted"]


def test_step_seconds_sum_to_the_loops_wall_time_and_async_takes_less(tmp_path):
    totals = {}
    for loop in TrainingLoop:
        result = run(tmp_path, steps=3, loop=loop, name=f"loop-{loop}")
        rows = list(read_jsonl(result.paths.metrics))
        steps = [r[CLOCK_PREFIX + "step_s"] for r in rows]
        assert math.isclose(sum(steps), rows[-1][CLOCK_PREFIX + "total_s"], rel_tol=1e-9)
        rollouts = [r[CLOCK_PREFIX + "rollout_s"] for r in rows]
        assert rollouts == [r[PREFIX + "step/wall_seconds"] for r in rows]
        trains = [r[CLOCK_PREFIX + "train_s"] for r in rows]
        for r in rows:  # training time is proportional to the trained tokens
            assert math.isclose(r[CLOCK_PREFIX + "train_s"], r[CLOCK_PREFIX + "trained_tokens"] * MODEL.train_s_per_token)
        plan = async_schedule if loop is TrainingLoop.ASYNC else sync_schedule
        assert math.isclose(rows[-1][CLOCK_PREFIX + "total_s"], plan(rollouts, trains, MODEL.weight_sync_s)[-1].synced)
        totals[loop] = rows[-1][CLOCK_PREFIX + "total_s"]
    assert totals[TrainingLoop.ASYNC] < totals[TrainingLoop.SYNC]


def test_the_machine_clock_writes_no_clock_figures(tmp_path):
    config = RolloutConfig(knobs=SMALL, steps=1, out=tmp_path, name="machine")
    result = asyncio.run(run_rollout(config, synthetic_runner(), [f"task-{i:04d}" for i in range(200)]))
    row = next(iter(read_jsonl(result.paths.metrics)))
    assert not [k for k in row if k.startswith(CLOCK_PREFIX)]
    assert "clock" not in read_json(result.paths.config)  # the default is not recorded: older runs resume as they were
