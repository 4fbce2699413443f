"""The judge on the modelled clock: equal modelled wall time, the time to reach seed/fixed's final, async against
sync, and the interval's width against the number of seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_selection import run_argv
from benchmarks.bench_selection_clock import REGIME, analyse, seeds_needed, versus

REGIME_OUT = Path("/nonexistent")  # run_argv names the folder; nothing is run


def run(curve: list[tuple[float, float, float]]) -> dict:
    """(episodes, modelled seconds, success) per evaluation."""
    points = [{"trained_steps": 5 * i, "episodes": e, "env_steps": 4 * e, "wall_s": m, "model_s": m, "success": y,
               "greedy": y} for i, (e, m, y) in enumerate(curve)]
    return {"curve": points, "final_eval_success": points[-1]["success"], "model_total_s": points[-1]["model_s"],
            "steps_within_budget": 30.0, "generated_episodes": points[-1]["episodes"],
            "budget": {"final_eval_success": points[-1]["success"], "informative_per_1k_generated_episodes": 50.0}}


def test_a_run_that_saves_episodes_but_not_time_is_judged_on_time():
    base = {str(s): run([(0, 0, 0.5), (2560, 1000, 0.6), (5120, 2000, 0.7)]) for s in range(3)}
    # the same success per episode spent, but each episode costs twice the wall time (e.g. more training steps)
    slow = {str(s): run([(0, 0, 0.5), (2560, 2000, 0.6), (5120, 4000, 0.7)]) for s in range(3)}
    judged = versus(slow, base)
    reach = judged["to_reach_seed_fixed_final"]
    assert reach["median_ratio_episodes"] == pytest.approx(1.0)
    assert reach["median_ratio_model_s"] == pytest.approx(2.0)
    equal = judged["at_equal_model_time"]
    assert equal["interval_at_common_last"]["mean"] == pytest.approx(-0.1)  # at 2000 s: 0.6 against 0.7
    assert equal["worst_low"] == pytest.approx(-0.1)


def test_async_is_paired_with_sync_of_the_same_strategy_and_the_best_is_the_quickest_to_seed_fixeds_final():
    base = {str(s): run([(0, 0, 0.5), (2560, 1000, 0.6), (5120, 2000, 0.7)]) for s in range(3)}
    quick = {str(s): run([(0, 0, 0.5), (2560, 800, 0.65 + s / 100), (5120, 1600, 0.72)]) for s in range(3)}
    figs = {"seed/fixed": base, "skip/fixed": base, "skip/fixed+async": quick}
    out = analyse(figs)
    assert out["best"] == "skip/fixed+async"
    assert set(out["async_against_sync"]) == {"skip/fixed"}
    assert out["async_against_sync"]["skip/fixed"]["at_equal_model_time"]["worst_low"] > 0
    assert all(t["met"] for t in out["targets"].values())


def test_the_intervals_width_shrinks_with_the_seeds_and_the_verdict_names_the_seeds_it_needs():
    diffs = {str(s): 0.02 + (0.03 if s % 2 else -0.03) for s in range(8)}
    needed = seeds_needed(diffs)
    widths = [w["width"] for w in needed["widths"]]
    assert [w["seeds"] for w in needed["widths"]] == list(range(2, 9))
    assert widths[-1] < widths[0]
    assert needed["seeds_for_half_width"] == pytest.approx((1.96 * needed["sd_between_seeds"] / 0.01) ** 2, abs=1)


def test_every_run_of_the_judge_is_on_the_modelled_clock_and_async_runs_train_async():
    argv = run_argv(REGIME, "skip/adaptive/staged+async", 3, REGIME_OUT, "x")
    assert argv[argv.index("--clock") + 1] == "modelled" and argv[argv.index("--loop") + 1] == "async"
    assert argv[argv.index("--siblings") + 1] == "staged" and argv[argv.index("--waves") + 1] == "adaptive"
    assert "--loop" not in run_argv(REGIME, "seed/fixed", 3, REGIME_OUT, "y")




def test_a_tis_config_runs_the_async_loop_with_slimes_default_tis_clip_and_only_after_async():
    argv = run_argv(REGIME, "forecast/fixed+async+tis", 3, REGIME_OUT, "x")
    assert argv[argv.index("--loop") + 1] == "async" and argv[argv.index("--tis-cap") + 1] == "2.0"
    assert argv[argv.index("--selection") + 1] == "forecast" and argv[argv.index("--waves") + 1] == "fixed"
    assert "--tis-cap" not in run_argv(REGIME, "forecast/fixed+async", 3, REGIME_OUT, "y")
    with pytest.raises(ValueError, match=r"\+tis corrects the async loop's policy lag"):
        run_argv(REGIME, "seed/fixed+tis", 3, REGIME_OUT, "z")


def test_when_no_config_reaches_seed_fixeds_final_the_best_is_the_one_with_the_highest_worst_bound():
    base = {str(s): run([(0, 0, 0.5), (2560, 1000, 0.6), (5120, 2000, 0.7)]) for s in range(3)}
    lagging = {str(s): run([(0, 0, 0.5), (2560, 800, 0.55), (5120, 1600, 0.62)]) for s in range(3)}
    close = {str(s): run([(0, 0, 0.5), (2560, 800, 0.6), (5120, 1600, 0.68)]) for s in range(3)}
    out = analyse({"seed/fixed": base, "forecast/fixed+async": lagging, "forecast/fixed+async+tis": close})
    assert all(v["to_reach_seed_fixed_final"]["median_ratio_model_s"] is None for v in out["against_seed_fixed"].values())
    assert out["best"] == "forecast/fixed+async+tis"
