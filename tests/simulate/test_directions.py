"""The simulated world whose prompts disagree about what to learn (``directions``), and its fit to the learner."""

from __future__ import annotations

import math
import random

import pytest

from shopsimrl.cli import main
from shopsimrl.sampling.estimate import sigmoid
from shopsimrl.simulate.calibrate_learner import LEARNER_2000, fit_difficulties, rank_agrees
from shopsimrl.simulate.directions import DirectionGeometry, Stance, draw_kinds
from shopsimrl.simulate.model import DIRECTION_FIELDS, World, WorldParams


def test_the_stance_is_a_moving_average_of_the_trained_directions():
    stance = Stance(DirectionGeometry(2, angle_deg=60.0, weight=2.0, rate=0.5))
    assert stance.gains() == [0.0, 0.0]  # the untrained policy favours no kind
    stance.train([1] * 40)  # only the minority kind: the stance reaches its direction
    assert stance.gain(1) == pytest.approx(2.0)
    assert stance.gain(0) == pytest.approx(2.0 * math.cos(math.radians(120.0)))  # 120° apart: -1 logit
    mixed = Stance(DirectionGeometry(2, angle_deg=60.0, weight=2.0, rate=0.01))
    mixed.train([0, 1] * 500)  # both kinds alike: the mean direction, which favours each by w cos²α = 0.5
    assert mixed.gain(0) == pytest.approx(0.5, abs=0.05) and mixed.gain(1) == pytest.approx(0.5, abs=0.05)


def test_over_training_an_unrepresentative_subset_lowers_the_rest_below_their_start():
    params = WorldParams(prompts=200, directions=2, direction_angle_deg=60.0, direction_weight=2.0,
                         direction_rate=0.05, eta_global=0.0, majority_share=0.6)
    focus, mixed = World(params, 3), World(params, 3)
    start = focus.kind_pass_rates()
    minority = [p for p, k in zip(focus.prompt_ids, focus.kind_of) if k == 1]
    rng = random.Random(0)
    for _ in range(30):
        focus.train(minority[:16])  # the same 16 prompts of one kind, every step
        mixed.train(rng.sample(mixed.prompt_ids, 16))  # prompts as the data holds them
    after = focus.kind_pass_rates()
    assert after[1] > start[1] + 0.1  # the focus kind gains
    assert after[0] < start[0] - 0.05  # the untouched majority falls below where it started
    both = mixed.kind_pass_rates()
    assert both[0] > start[0] and both[1] > start[1]  # trained as the data holds them, both gain


def test_a_world_without_directions_is_the_calibrated_world_to_the_draw():
    plain = World(WorldParams(prompts=300), 5)
    same_means = World(WorldParams(prompts=300, directions=2, kind_difficulty_step=0.0), 5)
    assert plain.difficulty == same_means.difficulty  # the kinds come from a stream of their own
    assert plain.stance is None and set(plain.kind_of) == {0}
    assert not set(DIRECTION_FIELDS) & set(WorldParams().as_dict())  # the default world's record is unchanged
    assert set(DIRECTION_FIELDS) <= set(LEARNER_2000.as_dict())


def test_kind_shares_and_difficulty_step():
    kinds = draw_kinds(20000, 3, 0.5, seed=1)
    assert kinds.count(0) / 20000 == pytest.approx(0.5, abs=0.01)
    assert kinds.count(1) / 20000 == pytest.approx(0.25, abs=0.01)
    world = World(WorldParams(prompts=4000, directions=2, majority_share=0.5, difficulty_mean=-1.0,
                              difficulty_sd=1.0, kind_difficulty_step=3.0), 2)
    by_kind = [[d for d, k in zip(world.difficulty, world.kind_of) if k == kind] for kind in (0, 1)]
    assert sum(by_kind[0]) / len(by_kind[0]) == pytest.approx(-1.0, abs=0.1)
    assert sum(by_kind[1]) / len(by_kind[1]) == pytest.approx(2.0, abs=0.1)


@pytest.mark.parametrize("bad", [dict(directions=1), dict(directions=2, clusters=4),
                                 dict(directions=2, direction_angle_deg=120.0), dict(directions=2, majority_share=1.0),
                                 dict(directions=2, direction_rate=1.5)])
def test_world_refuses_impossible_directions(bad):
    with pytest.raises(ValueError):
        WorldParams(**bad)


def test_fit_difficulties_recovers_a_known_population():
    rng = random.Random(7)
    per_task, first = {}, {}
    for i in range(400):
        kind = i % 2 == 0
        logit = rng.gauss(2.0 if kind else -1.0, 1.5)
        per_task[f"t{i}"] = sum(rng.random() < sigmoid(logit) for _ in range(16)) / 16
        first[f"t{i}"] = kind
    fit = fit_difficulties(per_task, first)
    assert fit["difficulty_mean"] == pytest.approx(-2.0, abs=0.5)
    assert fit["kind_difficulty_step"] == pytest.approx(3.0, abs=0.5)
    assert fit["difficulty_sd"] == pytest.approx(1.5, abs=0.5)


def test_rank_agreement_ignores_pairs_the_learner_cannot_separate():
    learner = {"a": (0.80, 0.82, 0.78, 0.80), "b": (0.81, 0.80, 0.785, 0.80), "c": (0.70, 0.75, 0.60, 0.82),
               "d": (0.60, 0.85, 0.60, 0.90)}  # paired by seed
    verdict = rank_agrees({"a": 0.9, "b": 0.85, "c": 0.6, "d": 0.95}, learner)
    assert verdict["agrees"]  # a-b within the tie; a-d and b-d: the median is large but two seeds disagree
    assert not verdict["pairs"]["a - d"]["separated"] and verdict["pairs"]["a - c"]["separated"]
    assert not verdict["strict_agrees"]  # in the medians' order, a - d would be reversed
    wrong = rank_agrees({"a": 0.9, "b": 0.85, "c": 0.95, "d": 0.5}, learner)
    assert not wrong["agrees"] and {tuple(d["pair"]) for d in wrong["disagreements"]} == {("a", "c"), ("b", "c")}


def test_cli_refuses_directions_with_clusters(tmp_path, capsys):
    assert main(["simulate", "--steps", "2", "--timeline-step", "1", "--directions", "2", "--clusters", "3",
                 "--out", str(tmp_path)]) == 2
    assert "refused" in capsys.readouterr().err


def test_the_learner_world_ranks_the_strategies_as_the_learner_does():
    """The acceptance of the learner world: on the report seeds 0-4 (the fit used 100-104) it orders every pair of
    the five selections that the learner separates on held-out success as the learner does."""
    from benchmarks.bench_learner_world import learner_targets
    from shopsimrl.simulate.calibrate_learner import RANKED
    from shopsimrl.simulate.side_by_side import compare

    out = compare(steps=30, seeds=(0, 1, 2, 3, 4), world=LEARNER_2000, selections=RANKED)
    check = next(iter(learner_targets(out["summary"]).values()))
    assert check["met"], check["disagreements"]
