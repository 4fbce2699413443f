"""The capacity model (episodes in flight share the engine's throughput) and staged siblings in the simulator."""

from __future__ import annotations

import pytest

from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.simulate.capacity import SharedThroughput, calibrate_capacity, makespan
from shopsimrl.simulate.engine import simulate_run


def finish_times(clock: SharedThroughput) -> dict:
    out = {}
    while clock.in_flight:
        now, keys = clock.next()
        out.update({k: now for k in keys})
    return out


def test_without_capacity_every_episode_runs_at_solo_speed():
    clock = SharedThroughput(None)
    for key, d in (("a", 3.0), ("b", 1.0), ("c", 2.0)):
        clock.start(key, d)
    assert finish_times(clock) == {"a": 3.0, "b": 1.0, "c": 2.0}


def test_episodes_beyond_capacity_share_it_and_speed_up_as_others_finish():
    clock = SharedThroughput(1.0)
    clock.start("short", 1.0)
    clock.start("long", 2.0)
    # both at half speed until the short one is done (t = 2), then the long one alone: 1 s of work left
    assert finish_times(clock) == pytest.approx({"short": 2.0, "long": 3.0})
    clock = SharedThroughput(2.0)
    for i in range(4):
        clock.start(i, 1.0)
    assert list(finish_times(clock).values()) == pytest.approx([2.0] * 4)


def test_an_episode_not_run_frees_throughput_for_the_others():
    clock = SharedThroughput(1.0)
    clock.start("kept", 2.0)
    clock.start("aborted", 2.0)
    clock.cancel(["aborted"])
    clock.cancel(["aborted"])  # idempotent
    assert finish_times(clock) == {"kept": 2.0}


def test_capacity_is_calibrated_so_the_seeds_wave_takes_the_target_time():
    wave = 64
    unshared = calibrate_capacity(wave, 10.0, 0.5, target_s=1.0, waves=11)
    assert unshared == wave  # a target below the unshared makespan: no sharing within the wave
    c = calibrate_capacity(wave, 10.0, 0.5, target_s=60.0, waves=11)
    assert 1.0 < c < wave
    import math
    import random
    from statistics import median

    rng = random.Random("shopsimrl-simulate/capacity/0")
    draws = [[rng.lognormvariate(math.log(10.0), 0.5) for _ in range(wave)] for _ in range(11)]
    assert median(makespan(d, c) for d in draws) == pytest.approx(60.0, rel=0.01)


def test_the_shell_without_capacity_or_staging_makes_the_default_loops_decisions():
    default = simulate_run(selection="seed", waves="fixed", steps=6, seed=3)
    shell = simulate_run(selection="seed", waves="fixed", steps=6, seed=3, capacity=1e9)
    fields = ("submitted", "accepted", "fallback", "zero_std_dropped", "aborted")
    assert [[getattr(r, f) for f in fields] for r in shell.steps] == [[getattr(r, f) for f in fields]
                                                                      for r in default.steps]
    assert [r.wall_s for r in shell.steps] == pytest.approx([r.wall_s for r in default.steps])


@pytest.mark.parametrize("waves", ["fixed", "adaptive"])
def test_staged_rows_count_the_episodes_they_generate_and_train_whole_groups(waves):
    run = simulate_run(selection="seed", waves=waves, steps=30, seed=0, capacity=185.0,
                       staging=StagedSiblings.of(8), label="x")
    summary = run.summary(8)
    stopped = summary["stopped_early"]
    assert stopped > 0 and summary["episodes_saved_by_staging"] == 4 * stopped
    assert summary["generated_episodes"] < 8 * summary["groups_submitted"]
    for r in run.steps:
        assert r.accepted + r.fallback == 16
        assert r.episodes <= 8 * r.submitted
    assert summary["wall_s_per_informative_group"] == pytest.approx(summary["wall_time_s"] /
                                                                    summary["informative_trained"])


def test_staged_cli_skip_q_starts_groups_whole_and_is_refused_without_staging(tmp_path, capsys):
    import json

    from shopsimrl.cli import main

    def staged_row(skip: list[str]) -> dict:
        out = tmp_path / ("skip" if skip else "default")
        assert main(["simulate", "--steps", "3", "--seeds", "0", "--timeline-step", "2", "--siblings", "staged",
                     *skip, "--out", str(out)]) == 0
        return json.loads((out / "summary.json").read_text())

    default, skipping = staged_row([]), staged_row(["--stage-skip-q", "0.0"])  # q >= 0: every group starts whole
    assert default["staging"]["skip_q"] == 0.5 and skipping["staging"]["skip_q"] == 0.0
    rows = skipping["summary"]
    assert rows["seed/fixed+staged"] == rows["seed/fixed"]  # nothing staged: the seed's figures
    key = "generated_per_trained_episode"
    assert default["summary"]["seed/fixed+staged"][key] < rows["seed/fixed"][key]  # staged: fewer episodes
    assert main(["simulate", "--steps", "2", "--timeline-step", "1", "--stage-skip-q", "0.5", "--out",
                 str(tmp_path / "refused")]) == 2
    assert "--stage-skip-q is for --siblings staged" in capsys.readouterr().err
