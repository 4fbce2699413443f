"""The main job with prompt selection and adaptive waves: same controller rules, the selector fed, pictures."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from rollout.fakes import jittered, load_events, read_json

from shopsimrl.agent.heuristic import LEARNING_DECAY, HeuristicPolicy
from shopsimrl.commands import rollout as cli
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.synthetic import synthetic_runner
from shopsimrl.sampling import SamplingKnobs
from shopsimrl.sampling.concentration import (
    DISTINCT_PROMPTS_EPOCH,
    MAX_TRAININGS_PER_PROMPT,
    SEED_ORDER_BOUND,
    TOP10_SHARE,
)
from shopsimrl.sampling.modes import Selection, WaveMode
from shopsimrl.sampling.selection_metrics import SELECTOR_PREFIX

KNOBS = SamplingKnobs(rollout_batch_size=4, n_samples_per_prompt=4, over_sampling_batch_size=8,
                      global_batch_size=8, max_consecutive_failed_groups=50)


def run(tmp_path, *, selection, waves, steps=4, learner=None, timeline=False):
    config = RolloutConfig(knobs=KNOBS, steps=steps, seed=0, out=tmp_path, name=f"{selection}-{waves}",
                           selection=Selection(selection), waves=WaveMode(waves), timeline=timeline)
    tasks = [f"task-{i:04d}" for i in range(60)]
    return asyncio.run(run_rollout(config, synthetic_runner(delay=jittered()), tasks, learner=learner))


@pytest.mark.parametrize(("selection", "waves"), [("skip", "fixed"), ("skip", "adaptive"),
                                                  ("spread", "adaptive"), ("seed", "adaptive")])
def test_every_step_keeps_the_target_and_never_starts_a_task_twice(tmp_path, selection, waves):
    trained: list[list[str]] = []
    result = run(tmp_path, selection=selection, waves=waves, learner=trained.append)
    assert len(trained) == 4
    for report in result.reports:
        assert len(report.kept) == KNOBS.rollout_batch_size
        tasks = [g.task_id for g in report.groups.values()]
        assert len(tasks) == len(set(tasks)), "a step starts each task at most once"
        assert report.metrics[SELECTOR_PREFIX + "prompts_chosen"] == len(report.groups)
        assert SELECTOR_PREFIX + "informative_per_1k_episodes" in report.metrics
        informative = [report.groups[i].task_id for i in report.kept if i not in set(report.fallback)]
        assert trained[report.step - 1] == informative
        if waves == "fixed":
            assert len(report.groups) % KNOBS.over_sampling_batch_size == 0
    config = read_json(result.paths.config)
    assert (config["selection"], config["waves"]) == (selection, waves)
    if selection == "spread":  # every pick is paid for under adaptive waves: exploration is paced slower
        assert config["explore_horizon_epochs"] == (8.0 if waves == "adaptive" else 2.0)
    else:  # the seed's order has no exploration to pace
        assert "explore_horizon_epochs" not in config


def test_adaptive_waves_submit_in_small_refills_within_one_wave_unless_remaining_runs_short(tmp_path):
    result = run(tmp_path, selection="skip", waves="adaptive", steps=6)
    for report in result.reports:
        events = load_events(result.paths.step(report.step).root)
        waves = [e for e in events if e["event"] == "wave"]
        sizes = [e["last_index"] - e["first_index"] + 1 for e in waves]
        assert sum(sizes) == len(report.groups)
        over_budget = [e for e in waves if e["first_index"] >= KNOBS.over_sampling_batch_size]
        for e in over_budget:  # past one wave's budget, only what keeps remaining >= target
            assert e["remaining"] >= KNOBS.rollout_batch_size


def test_the_timeline_picture_is_written_per_step(tmp_path):
    result = run(tmp_path, selection="skip", waves="adaptive", steps=2, timeline=True)
    for k in (1, 2):
        png = result.paths.step(k).root / "wave_timeline.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_faithful_default_writes_no_selector_metrics(tmp_path):
    result = run(tmp_path, selection="seed", waves="fixed", steps=1)
    assert not any(k.startswith(SELECTOR_PREFIX) for k in result.reports[0].metrics)


@pytest.mark.parametrize("selection", ["seed", "skip", "spread"])
def test_every_run_logs_its_concentration_counted_from_the_trained_groups(tmp_path, selection):
    """metrics.jsonl carries the three figures each step, for the faithful order too, counted from batch.jsonl."""
    result = run(tmp_path, selection=selection, waves="fixed", steps=6)
    lines = [json.loads(line) for line in (result.paths.root / "metrics.jsonl").read_text().splitlines()]
    counts: Counter[str] = Counter()
    for k, line in enumerate(lines, start=1):
        batch = [json.loads(row) for row in (result.paths.step(k).root / "batch.jsonl").read_text().splitlines()]
        counts.update({row["task_id"] for row in batch})  # one group per trained task
        assert line[MAX_TRAININGS_PER_PROMPT] == max(counts.values())
        top = sorted(counts.values(), reverse=True)[:10]
        assert line[TOP10_SHARE] == pytest.approx(sum(top) / sum(counts.values()))
        assert 0 < line[DISTINCT_PROMPTS_EPOCH] <= 60 and line[SEED_ORDER_BOUND] >= 1
    if selection == "seed":  # 8 prompts per step of 60: the first pass lasts 7 steps, nothing trained twice
        assert lines[-1][DISTINCT_PROMPTS_EPOCH] == 6 * KNOBS.rollout_batch_size
        assert lines[-1][MAX_TRAININGS_PER_PROMPT] == 1


def test_heuristic_learning_mode_sharpens_only_trained_tasks():
    policy = HeuristicPolicy(learning=True)
    assert policy.options_for("a") == policy.options
    policy.learn(["a", "a"])
    sharper = policy.options_for("a")
    assert sharper.temperature == pytest.approx(policy.options.temperature * LEARNING_DECAY**2)
    assert sharper.keep_word == pytest.approx(1 - (1 - policy.options.keep_word) * LEARNING_DECAY**2)
    assert policy.options_for("b") == policy.options
    frozen = HeuristicPolicy()
    frozen.learn(["a"])
    assert frozen.options_for("a") == frozen.options and frozen.describe()["learning"] is False


def test_cli_informative_adaptive_learning_on_the_in_process_env(tmp_path, cli_cache, capsys):
    code = cli.main(["--steps", "2", "--products", "2000", "--out", str(tmp_path), "--name", "sel",
                     "--view", "plain", "--selection", "skip", "--waves", "adaptive", "--learning"])
    out = capsys.readouterr().out
    assert code == 0, out
    run_dir = tmp_path / "sel"
    for k in (1, 2):
        step = run_dir / f"step-{k}"
        assert (step / "wave_timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        metrics = json.loads((step / "metrics.json").read_text())
        assert metrics["rollout/shopsim/train_group_count"] == 16
        assert SELECTOR_PREFIX + "predicted_zero_spread_mean" in metrics
    config = read_json(run_dir / "run.json")
    assert config["learning"] is True and config["selection"] == "skip" and config["waves"] == "adaptive"


@pytest.mark.parametrize(("argv", "message"), [
    (["--learning", "--policy", "openai", "--openai-base-url", "http://127.0.0.1:1", "--openai-model", "m"],
     "--learner heuristic is a mode of the heuristic policy"),
    (["--waves", "adaptive", "--cushion", "nan"], "--cushion"),
])
def test_cli_refuses_bad_selection_options(tmp_path, capsys, argv, message):
    assert cli.main([*argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
