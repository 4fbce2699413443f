"""The selection benchmark's judge: curves interpolated at equal cost, paired by seed, and the issue's targets."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_selection import REGIMES, at, concentration, interval, paired, targets, to_reach, within


def point(episodes: float, success: float, steps: int = 0) -> dict[str, float]:
    return {"trained_steps": steps, "episodes": episodes, "env_steps": 4 * episodes, "wall_s": episodes / 100,
            "success": success, "greedy": success}


def run(curve: list[tuple[float, float]], informative_per_1k: float = 50.0, most: float = 6.0) -> dict:
    points = [point(x, y, i * 5) for i, (x, y) in enumerate(curve)]
    return {"curve": points, "final_eval_success": points[-1]["success"],
            "informative_per_1k_generated_episodes": informative_per_1k, "max_trainings_per_prompt": most}


def test_success_is_linear_between_evaluations_and_unknown_beyond_the_last():
    curve = [point(0, 0.5), point(1000, 0.7), point(2000, 0.8)]
    assert at(curve, 500) == pytest.approx(0.6)
    assert at(curve, 2000) == pytest.approx(0.8)
    assert at(curve, 2500) is None
    assert at(curve, 2000, "env_steps") == pytest.approx(0.6)  # another cost axis (4 env steps per episode here)


def test_episodes_to_reach_is_the_first_crossing():
    curve = [point(0, 0.5), point(1000, 0.7), point(2000, 0.9), point(3000, 0.6)]
    assert to_reach(curve, 0.8) == pytest.approx(1500)
    assert to_reach(curve, 0.5) == 0
    assert to_reach(curve, 0.95) is None


def test_pairs_by_seed_from_2500_episodes_and_at_the_largest_cost_both_reached():
    grid = [0, 1280, 2560, 3840, 5120]
    base = {s: run([(x, 0.5 + x / 10240) for x in grid]) for s in (0, 1, 2)}
    # seed 0 better by 0.02 everywhere, seed 1 worse by 0.05, seed 2 equal; fewer episodes (adaptive waves)
    other = {s: run([(x, 0.5 + x / 10240 + d) for x in (0, 1000, 2000, 3000, 4000)], 80.0, 9.0)
             for s, d in ((0, 0.02), (1, -0.05), (2, 0.0))}
    out = paired({"seed/fixed": base, "x/adaptive": other})["x/adaptive"]
    eq = out["at_equal_episodes"]
    assert eq["seed_fixed_evaluations_at"] == [2560, 3840, 5120]  # 5120: beyond every seed's last evaluation
    assert eq["per_seed"][1]["at_seed_fixed_evaluations"] == [pytest.approx(-0.05), pytest.approx(-0.05), None]
    assert eq["median_per_evaluation"] == [pytest.approx(0.0), pytest.approx(0.0), None]
    assert eq["median_at_common_last"] == pytest.approx(0.0) and eq["worst_median"] == pytest.approx(0.0)
    assert eq["per_seed"][0]["at_common_last"] == pytest.approx(0.02)  # at 4,000 episodes, the selection's last
    assert out["informative_per_1k_ratio"]["median"] == pytest.approx(1.6)
    assert out["max_trainings_ratio"]["median"] == pytest.approx(1.5)
    assert out["final_eval_success_diff"]["per_seed"][1] == pytest.approx(4000 / 10240 - 5120 / 10240 - 0.05)
    reach = out["episodes_to_reach_seed_fixed_final"]
    assert reach["reached"] == 0 and reach["median_ratio"] is None  # none reaches seed/fixed's final success


def test_the_interval_resamples_seeds_and_averages_a_seed_s_repetitions():
    diffs = {"0": 0.02, "0r1": 0.04, "1": -0.01, "2": 0.01, "3": None}  # seed 0 twice, seed 3 never reached
    out = interval(diffs)
    assert out is not None
    assert out["seeds"] == 3 and out["mean"] == pytest.approx((0.03 - 0.01 + 0.01) / 3)  # seed 0 counts once: 0.03
    assert (out["above"], out["below"]) == (2, 1)
    assert -0.01 <= out["low"] < out["mean"] < out["high"] <= 0.03  # within the seeds' extremes
    assert interval(diffs) == out  # one set of runs, one interval
    assert interval({"0": 0.05, "0r1": 0.01}) is None  # one seed: no interval


def test_the_interval_separates_a_steady_difference_and_not_a_mixed_one():
    steady = interval({str(s): 0.02 + 0.001 * (s % 3) for s in range(15)})
    mixed = interval({str(s): 0.02 if s % 2 else -0.02 for s in range(15)})
    assert steady is not None and steady["low"] > 0
    assert mixed is not None and mixed["low"] < 0 < mixed["high"]


def test_targets_say_met_or_not_with_the_numbers():
    grid = [0, 1280, 2560, 3840, 5120, 6400, 7680]
    base = {s: run([(x, 0.5 + x / 20000) for x in grid]) for s in (0, 1)}
    fast = {s: run([(x, 0.5 + x / 10000) for x in grid[:5]], 70.0, 8.0) for s in (0, 1)}
    slow = {s: run([(x, 0.5 + x / 20000 - 0.03) for x in grid], 60.0, 20.0) for s in (0, 1)}
    regimes = {"products_2000": {"summary": {"seed/fixed": {"max_trainings_per_prompt": 6.0},
                                             "skip/fixed": {"max_trainings_per_prompt": 20.0},
                                             "skip/adaptive": {"max_trainings_per_prompt": 8.0}},
                                 "paired": paired({"seed/fixed": base, "skip/adaptive": fast,
                                                   "skip/fixed": slow})}}
    checks = targets({"regimes": regimes})
    better = checks["products_2000: skip/adaptive held-out success at equal generated episodes >= "
                    "seed/fixed - 0.01"]
    assert better["met"] and better["met_by_every_interval"]
    held = checks["products_2000: skip/fixed held-out success at equal generated episodes >= seed/fixed - 0.01"]
    assert not held["met"] and held["value"] == pytest.approx(-0.03)
    assert not held["met_by_every_interval"] and held["worst_interval_low"] == pytest.approx(-0.03)
    assert checks["products_2000: skip/adaptive informative groups per 1k generated episodes >= 1.3x "
                  "seed/fixed"]["value"] == pytest.approx(1.4)
    reach = checks["products_2000: skip/adaptive episodes to reach seed/fixed's final success <= 0.8x "
                   "(one catalog)"]
    assert reach["met"] and reach["value"] == pytest.approx(0.5)  # seed/fixed's final 0.884: at 3,840 against 7,680
    assert not checks["products_2000: skip/fixed most trainings of one prompt <= 1.5x seed order's"]["met"]
    json.dumps(checks)  # the block goes into the results file as it is


def test_concentration_counts_trained_groups_per_prompt(tmp_path):
    for step, tasks in ((1, ["a", "b", "c"]), (2, ["a", "b"]), (3, ["a"])):
        folder = tmp_path / f"step-{step}"
        folder.mkdir()
        rows = [{"step": step, "group_index": g, "task_id": t, "sibling": j} for g, t in enumerate(tasks)
                for j in range(2)]  # two rows per group: one group
        (folder / "batch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "events.jsonl").write_text(json.dumps({"event": "wave", "task_ids": tasks + ["z"]}) + "\n")
    c = concentration(tmp_path, train_tasks=4)
    assert c["max_trainings_per_prompt"] == 3 and c["distinct_prompts_trained"] == 3
    assert c["top10_share"] == 1.0
    assert c["distinct_per_train_size_starts_last"] == 3  # the last 4 starts: b, z, a, z


def test_every_strategy_is_judged_within_seed_fixed_s_budget_of_generated_episodes():
    """Adaptive waves spend less per step, so they run more steps; only the steps within 7,680 episodes count."""
    products = REGIMES[0]
    assert products.budget == 30 * 32 * 8 == 7680
    assert products.steps_of("seed/fixed") == products.steps_of("skip/fixed") == 30
    assert products.steps_of("skip/adaptive") == products.steps_of("skip/adaptive/staged") == 60
    rows = [{"step": k, "rollout/shopsim/waste/episodes_submitted": 200.0} for k in range(1, 49)]
    kept = within(rows, 7680.0)
    assert [r["step"] for r in kept] == list(range(1, 39))  # 38 × 200 = 7,600; the 39th would pass the budget
    assert within(rows[:1], 100.0) == rows[:1]  # a first step past the budget still counts: never an empty run


def test_the_most_trainings_are_counted_in_the_first_steps_and_the_rest_within_the_budget(tmp_path):
    for step, tasks in ((1, ["a", "b"]), (2, ["a"]), (3, ["a", "c"]), (4, ["a"])):
        folder = tmp_path / f"step-{step}"
        folder.mkdir()
        rows = [{"step": step, "group_index": g, "task_id": t} for g, t in enumerate(tasks)]
        (folder / "batch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "events.jsonl").write_text(json.dumps({"event": "wave", "task_ids": tasks}) + "\n")
    c = concentration(tmp_path, train_tasks=3, steps=2, last_step=3)
    assert c["max_trainings_per_prompt"] == 2  # a, in steps 1-2
    assert c["max_trainings_within_budget"] == 3  # a, in steps 1-3; step 4 is past the budget
    assert c["distinct_prompts_trained"] == 3 and c["distinct_per_train_size_starts_last"] == 2  # a, c of a, a, c
