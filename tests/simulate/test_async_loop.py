"""slime's two loops on the simulated clock (rollout/loops.py): the overlap rule, the policy lag, the default unchanged."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.rollout.loops import (
    POLICY_LAG,
    LaggedTrainer,
    TrainingLoop,
    TrainTiming,
    async_schedule,
    loop_wall_s,
    sync_schedule,
)
from shopsimrl.simulate.engine import simulate_run

LOOP_KEYS = {"train_s_per_step", "weight_sync_s", "loop_wall_time_s", "loop_mean_step_wall_s",
             "loop_wall_s_per_informative_group"}


# -- the overlap rule, by example ------------------------------------------------------------------------------------
def test_train_longer_than_rollout_is_train_bound():
    """Training 30 s, rollouts 10 s: after the first rollout every step costs the training, not the rollout."""
    spans = async_schedule([10.0, 10.0, 10.0], [30.0] * 3, 0.0)
    assert [s.train_start for s in spans] == [10.0, 40.0, 70.0]
    assert spans[-1].synced == 100.0  # 10 + 30 + 30 + 30
    assert sync_schedule([10.0] * 3, [30.0] * 3, 0.0)[-1].synced == 120.0


def test_rollout_longer_than_train_is_rollout_bound():
    """Rollouts 50 s, training 10 s: the trainer waits for each next rollout; only the last training shows."""
    spans = async_schedule([50.0] * 3, [10.0] * 3, 0.0)
    assert [s.rollout_start for s in spans] == [0.0, 50.0, 100.0]
    assert [s.rollout_end for s in spans] == [50.0, 100.0, 150.0]
    assert spans[-1].synced == 160.0  # 50 + 50 + 50 + 10
    assert sync_schedule([50.0] * 3, [10.0] * 3, 0.0)[-1].synced == 180.0


def test_first_step_has_nothing_to_overlap():
    """The first rollout runs alone (no training before it); one step is the same in both loops."""
    spans = async_schedule([40.0, 40.0], [30.0, 30.0], 2.0)
    assert (spans[0].rollout_start, spans[0].rollout_end, spans[0].train_start) == (0.0, 40.0, 40.0)
    assert async_schedule([40.0], [30.0], 2.0) == sync_schedule([40.0], [30.0], 2.0)
    assert async_schedule([40.0], [30.0], 2.0)[-1].synced == 72.0


def test_last_training_step_has_nothing_to_overlap():
    """No rollout follows the last step: its training and weight sync add in full."""
    spans = async_schedule([40.0, 40.0], [30.0, 30.0], 2.0)
    # step 0: train 40-70 beside rollout 1 (40-80), sync 80-82; step 1: train 82-112, sync 112-114
    assert spans[1].train_start == 82.0
    assert spans[-1].synced == 114.0


def test_weight_sync_waits_for_the_running_rollout():
    """slime waits for generate(k+1) before update_weights: a long next rollout delays the sync, never the reverse."""
    spans = async_schedule([10.0, 40.0], [5.0, 5.0], 3.0)
    assert spans[0].train_end == 15.0
    assert spans[0].synced == 53.0  # rollout 1 ends at 50, then 3 s of sync
    assert spans[1].train_start == 53.0


def test_sync_loop_is_the_sum_of_its_parts():
    rollouts, train = [12.0, 30.0, 7.5], [9.0, 9.0, 9.0]
    assert sync_schedule(rollouts, train, 1.5)[-1].synced == pytest.approx(sum(rollouts) + sum(train) + 3 * 1.5)


def test_async_saves_the_hidden_part_of_each_overlap():
    """The saving is sum over k < N-1 of min(T_k, R_{k+1}): what one side hides of the other."""
    rollouts, train = [20.0, 5.0, 60.0, 30.0], [25.0, 25.0, 25.0, 25.0]
    saved = sum(min(t, r) for t, r in zip(train[:-1], rollouts[1:]))
    assert sync_schedule(rollouts, train, 2.0)[-1].synced - async_schedule(rollouts, train, 2.0)[-1].synced == \
        pytest.approx(saved)


def test_no_step_takes_no_time():
    assert loop_wall_s(TrainingLoop.ASYNC, [], TrainTiming()) == 0.0
    assert loop_wall_s("sync", [], TrainTiming()) == 0.0


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "30"])
def test_timing_refuses_what_is_not_seconds(bad):
    with pytest.raises(ValueError, match="train_s must be a finite number of seconds >= 0"):
        TrainTiming(train_s=bad)
    with pytest.raises(ValueError, match="weight_sync_s"):
        TrainTiming(weight_sync_s=bad)


def test_schedules_refuse_mismatched_or_negative_times():
    with pytest.raises(ValueError, match="one training time per rollout"):
        async_schedule([1.0, 2.0], [1.0], 0.0)
    with pytest.raises(ValueError, match="finite seconds >= 0"):
        sync_schedule([1.0, -2.0], [1.0, 1.0], 0.0)
    with pytest.raises(ValueError, match="loop must be one of sync, async"):
        loop_wall_s("overlap", [1.0], TrainTiming())


# -- the overlap rule, as properties -------------------------------------------------------------------------------
seconds = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def runs(draw, train=seconds):
    n = draw(st.integers(min_value=1, max_value=12))
    return draw(st.lists(seconds, min_size=n, max_size=n)), draw(st.lists(train, min_size=n, max_size=n)), \
        draw(seconds)


def _weights_behind(spans, k):
    """Training steps whose weights reached the engines after rollout k started: its lag behind train.py's."""
    synced_before = sum(1 for s in spans[:k] if s.synced <= spans[k].rollout_start)
    return k - synced_before


@settings(max_examples=300, deadline=None)
@given(runs())
def test_async_schedule_keeps_slime_s_order(run):
    """Every rollout in order, one at a time; training k after rollout k; no weight sync while a rollout runs;
    rollout k+1 starts with training k; the trainer trains one step at a time."""
    rollouts, train, sync = run
    spans = async_schedule(rollouts, train, sync)
    for k, s in enumerate(spans):
        assert s.rollout_end == pytest.approx(s.rollout_start + rollouts[k])
        assert s.train_start >= s.rollout_end
        assert s.synced >= s.train_end + sync - 1e-9
        for r in spans:  # the sync [synced - U, synced] never overlaps a rollout
            assert r.rollout_end <= s.synced - sync + 1e-9 or r.rollout_start >= s.synced - 1e-9
        if k:
            assert s.rollout_start >= spans[k - 1].rollout_end
            assert s.train_start >= spans[k - 1].synced
            assert s.rollout_start == spans[k - 1].train_start  # generate(k) starts with async_train(k-1)


@settings(max_examples=300, deadline=None)
@given(runs())
def test_async_wall_is_bounded_by_either_side_and_by_the_sync_loop(run):
    rollouts, train, sync = run
    n = len(rollouts)
    wall_async = async_schedule(rollouts, train, sync)[-1].synced
    wall_sync = sync_schedule(rollouts, train, sync)[-1].synced
    assert wall_async <= wall_sync + 1e-6
    assert wall_async >= max(sum(rollouts), sum(train)) + n * sync - 1e-6
    assert wall_sync - wall_async == pytest.approx(sum(min(t, r) for t, r in zip(train[:-1], rollouts[1:])),
                                                   abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(runs(train=st.floats(min_value=1e-3, max_value=1e4)))
def test_schedules_agree_with_the_policy_lag(run):
    """The engine's POLICY_LAG is the schedule's: an async rollout starts one synced training behind train.py's.
    (Training takes some time here: with none, the clock cannot tell a rollout started before a training step
    from one started after it.)"""
    rollouts, train, sync = run
    for loop, plan in ((TrainingLoop.SYNC, sync_schedule), (TrainingLoop.ASYNC, async_schedule)):
        spans = plan(rollouts, train, sync)
        assert _weights_behind(spans, 0) == 0
        for k in range(1, len(spans)):
            assert _weights_behind(spans, k) == POLICY_LAG[loop]


# -- the policy lag in the world --------------------------------------------------------------------------------------
def test_lagged_trainer_trains_each_batch_one_call_late_and_flushes_the_rest():
    trained: list[list[str]] = []
    late = LaggedTrainer(trained.append, 1)
    late(["a"])
    assert trained == []
    late(["b"])
    assert trained == [["a"]]
    assert late.flush() == 1
    assert trained == [["a"], ["b"]]
    assert late.flush() == 0
    at_once: list[list[str]] = []
    LaggedTrainer(at_once.append, 0)(["a"])
    assert at_once == [["a"]]
    with pytest.raises(ValueError, match="lag must be >= 0"):
        LaggedTrainer(at_once.append, -1)


def test_async_rollout_plays_the_world_one_training_step_late():
    """Step 1 is the same in both loops; in async, step 1's record has no training yet (held while rollout 2 runs),
    and step 2 plays the untrained world: sync's step 2 has learned from step 1."""
    sync = simulate_run(steps=3, seed=0)
    late = simulate_run(steps=3, seed=0, loop="async")
    first_sync, first_async = sync.steps[0].as_dict(), late.steps[0].as_dict()
    assert first_sync.pop("mean_pass_rate") > first_async.pop("mean_pass_rate") == late.initial_pass_rate
    assert first_sync == first_async
    assert sync.steps[0].accepted > 0
    assert late.steps[1].mean_pass_rate > late.initial_pass_rate  # step 1's groups trained at step 2's end
    assert late.label == "seed/fixed+async" and late.loop == "async"


def test_async_run_trains_every_step_by_its_end():
    """The last step's groups are trained after the last rollout: a one-step async run ends trained."""
    one = simulate_run(steps=1, seed=0, loop="async")
    assert one.steps[0].accepted > 0
    assert one.steps[0].mean_pass_rate == simulate_run(steps=1, seed=0).steps[0].mean_pass_rate


def test_timing_only_adds_the_loop_keys():
    """The default output stays: without timing no loop key; with it, the same figures plus the loop's."""
    plain = simulate_run(steps=4, seed=1).summary(8)
    timed = simulate_run(steps=4, seed=1, timing=TrainTiming(30.0, 2.0)).summary(8)
    assert not LOOP_KEYS & set(plain)
    assert set(timed) - set(plain) == LOOP_KEYS
    assert {k: timed[k] for k in plain} == plain
    assert timed["loop_wall_time_s"] == pytest.approx(plain["wall_time_s"] + 4 * 32.0)
    assert timed["loop_wall_s_per_informative_group"] == pytest.approx(
        timed["loop_wall_time_s"] / timed["informative_trained"])


def test_async_summary_times_the_overlapped_loop():
    run = simulate_run(steps=5, seed=2, loop=TrainingLoop.ASYNC, timing=TrainTiming(30.0, 2.0))
    rollouts = [r.wall_s for r in run.steps]
    assert run.summary(8)["loop_wall_time_s"] == pytest.approx(
        rollouts[0] + sum(max(30.0, r) + 2.0 for r in rollouts[1:]) + 30.0 + 2.0)


def test_an_unknown_loop_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="loop must be one of sync, async, got 'fast'"):
        simulate_run(steps=1, loop="fast")


def test_cli_loop_flags_time_both_loops_and_write_the_timing(tmp_path, capsys):
    """``shopsimrl simulate --loop sync|async --train-s S``: the summary carries the loop, the timing and the loop's
    wall time per informative group; train_async.py is never slower than train.py on the same worlds."""
    from shopsimrl.cli import main

    walls = {}
    for loop in ("sync", "async"):
        out = tmp_path / loop
        assert main(["simulate", "--steps", "4", "--seeds", "0", "--timeline-step", "2", "--loop", loop,
                     "--train-s", "60", "--weight-sync-s", "1", "--out", str(out)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert (summary["loop"], summary["timing"]) == (loop, {"train_s": 60.0, "weight_sync_s": 1.0})
        walls[loop] = summary["summary"]["seed/fixed"]["loop_wall_s_per_informative_group"]
    assert "loop s/inf" in capsys.readouterr().out
    assert walls["async"] < walls["sync"]


def test_cli_without_loop_flags_writes_no_timing(tmp_path):
    from shopsimrl.cli import main

    assert main(["simulate", "--steps", "2", "--seeds", "0", "--timeline-step", "1", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "timing" not in summary and "loop_mean_step_wall_s" not in summary["summary"]["seed/fixed"]
