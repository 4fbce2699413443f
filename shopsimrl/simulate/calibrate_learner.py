"""The simulated world fitted to the main job's GRPO learner (``--products 2000``, 30 steps): ``LEARNER_2000``.

The calibrated world (``calibrate.py``) assumes every informative group teaches every
prompt the same.  The learner showed otherwise (docs/learning.md): its train prompts are of
two kinds, those whose goal product is the first search result for the shopper's query and
the rest, and what it learns from one kind hurts the other.  This world has those two kinds
(:mod:`~shopsimrl.simulate.directions`) and takes its constants from the learner's
measurements on the tuning seeds 100-104 (``LEARNER_MEASURED``, made by
``python -m benchmarks.diagnose_selection DIR --kinds spread/fixed spread/adaptive --seeds 100 101 102 103 104``
over the run folders of ``python -m benchmarks.bench_selection --seeds 100 101 102 103 104 --keep DIR``):

1. the share of prompts of the majority kind (goal first);
2. each kind's difficulty mean, so that its untrained mean pass rate is the measured one, for
   every spread of difficulties the grid tries (:func:`kind_means`);
3. how learning moves (the spread of difficulties, the shared skill's rate and novelty, the
   directions' angle, weight and rate) by a grid search (``DYNAMICS_GRID``) for the smallest
   squared error between simulated and measured figures after 30 steps of seed/fixed,
   spread/fixed and spread/adaptive: each kind's mean pass rate, the mean over every prompt, and
   the majority kind's share of the groups trained after step 10 (:func:`fit_dynamics`,
   simulated on the same tuning seeds).

The new ``skip`` rule is never fitted: the world predicts it.  The report seeds (the
simulator's 0-4, the learner's 0-14) check the ranking (``benchmarks/bench_learner_world.py``,
``tests/simulate/test_directions.py``).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from statistics import median
from typing import Any

from shopsimrl.defaults import DEFAULT_OVER_SAMPLING_BATCH_SIZE
from shopsimrl.sampling.estimate import POPULATION_NODES, hermite_rule, sigmoid
from shopsimrl.simulate.engine import simulate_run
from shopsimrl.simulate.model import WorldParams

TUNING_SEEDS = (100, 101, 102, 103, 104)
PROMPTS = 160  # train tasks of the --products 2000 catalog
EPOCHS = 6  # the benchmark walks them about six times ...
STEPS = EPOCHS * PROMPTS // DEFAULT_OVER_SAMPLING_BATCH_SIZE  # ... at 32 starts per step: its 30 steps
SAMPLES = 16  # episodes per task behind each measured success
EXPLORATION_STEPS = 10  # the trained kinds are compared after the selector's exploration
#: The selections whose figures are fitted (the new rule is predicted, not fitted).
FITTED = (("seed", "fixed"), ("spread", "fixed"), ("spread", "adaptive"))
#: The five selections the simulator must rank as the learner does.
RANKED = (("seed", "fixed"), ("spread", "fixed"), ("spread", "adaptive"), ("skip", "fixed"),
          ("skip", "adaptive"))

#: What the learner measured on seeds 100-104 (``benchmarks/results/selection_learner_kinds.json``; medians over the
#: seeds; train success with 16 episodes per task).  Kinds: (goal first, goal not first).
LEARNER_MEASURED: dict[str, Any] = {
    "goal_first_share": 0.56875,
    "untrained": (0.6415, 0.4873),
    "final": {"seed/fixed": (0.953, 0.764), "spread/fixed": (0.71, 0.887), "spread/adaptive": (0.713, 0.877)},
    "final_all": {"seed/fixed": 0.871, "spread/fixed": 0.786, "spread/adaptive": 0.785},
    "goal_first_share_of_trained_after_10": {"seed/fixed": 0.58, "spread/fixed": 0.30, "spread/adaptive": 0.31},
}

#: The grid of the dynamics fit (the spread of difficulties is fitted with it: see :func:`fit_dynamics`).
DYNAMICS_GRID: dict[str, tuple[float, ...]] = {
    "difficulty_sd": (0.5, 0.75, 1.0),
    "eta_global": (0.004, 0.006, 0.008),
    "novelty": (0.7, 0.8, 0.9),
    "direction_angle_deg": (90.0,),
    "direction_weight": (2.0, 3.0, 4.0),
    "direction_rate": (0.02,),
}


def _log_likelihood(successes: Sequence[int], n: int, mu: float, sd: float,
                    rule: Sequence[tuple[float, float]]) -> float:
    """Log-likelihood of tasks' success counts (of ``n``) when their logits are ``Normal(mu, sd)``."""
    rates = [(sigmoid(mu + sd * z), w) for z, w in rule]
    total = 0.0
    for k, count in Counter(successes).items():
        like = sum(w * p ** k * (1.0 - p) ** (n - k) for p, w in rates)
        total += count * (math.log(max(like, 1e-300)) + math.log(math.comb(n, k)))
    return total


def fit_difficulties(per_task: Mapping[str, float], goal_first: Mapping[str, bool], n: int = SAMPLES
                     ) -> dict[str, float]:
    """Each kind's mean logit and one shared spread, by maximum likelihood (a 0.25-logit grid)."""
    rule = list(zip(*hermite_rule(POPULATION_NODES)))
    kinds = {True: [round(per_task[t] * n) for t in per_task if goal_first[t]],
             False: [round(per_task[t] * n) for t in per_task if not goal_first[t]]}
    best: tuple[float, float, float, float] | None = None
    for sd in [0.25 * i for i in range(1, 17)]:
        fits = {}
        for kind, ks in kinds.items():
            fits[kind] = max((_log_likelihood(ks, n, mu, sd, rule), mu) for mu in [0.25 * i for i in range(-24, 25)])
        total = fits[True][0] + fits[False][0]
        if best is None or total > best[0]:
            best = (total, sd, fits[True][1], fits[False][1])
    assert best is not None
    _ll, sd, mu_first, mu_other = best
    return {"difficulty_mean": -mu_first, "difficulty_sd": sd, "kind_difficulty_step": mu_first - mu_other,
            "log_likelihood": _ll}


def learner_world(**overrides: Any) -> WorldParams:
    """The ``--products 2000`` regime with two kinds of prompt (the majority: goal first)."""
    base = WorldParams(prompts=PROMPTS, directions=2, majority_share=LEARNER_MEASURED["goal_first_share"],
                       eta_prompt=0.0)
    return replace(base, **overrides)


def kind_means(sd: float, untrained: Sequence[float]) -> dict[str, float]:
    """The world's difficulty mean and kind step that give each kind its measured untrained mean pass rate, when
    difficulties spread ``sd`` logits (bisection on ``E[sigmoid(mu + sd Z)]``)."""
    rule = list(zip(*hermite_rule(POPULATION_NODES)))

    def mean_rate(mu: float) -> float:
        return sum(w * sigmoid(mu + sd * z) for z, w in rule)

    mus = []
    for target in untrained:
        low, high = -20.0, 20.0
        for _ in range(60):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if mean_rate(mid) < target else (low, mid)
        mus.append(0.5 * (low + high))
    return {"difficulty_mean": -mus[0], "kind_difficulty_step": mus[0] - mus[-1]}


#: The fit (``python -m benchmarks.tune_learner_world``, ``benchmarks/results/selection_sim_fit.json``: the grid's best
#: point on the tuning seeds; docs/learning.md).  The kinds' means follow from the spread (:func:`kind_means`).
LEARNER_2000 = learner_world(difficulty_sd=0.5, **kind_means(0.5, LEARNER_MEASURED["untrained"]), eta_global=0.004,
                             novelty=0.9, direction_angle_deg=90.0, direction_weight=2.0, direction_rate=0.02)


def simulated_figures(world: WorldParams, selection: str, waves: str, seeds: Sequence[int],
                      steps: int = STEPS) -> dict[str, float]:
    """Medians over seeds: each kind's final mean pass rate, the mean over every prompt, and kind 0's share of the
    informative groups trained after the exploration steps."""
    rows = [simulate_run(selection=selection, waves=waves, steps=steps, seed=s, world=world).summary(8)
            for s in seeds]
    keys = ("kind_0_final_pass_rate", "kind_1_final_pass_rate", "final_mean_pass_rate",
            f"kind_0_share_of_trained_after_step_{EXPLORATION_STEPS}")
    return {k: median(r[k] for r in rows) for k in keys}


def dynamics_loss(world: WorldParams, measured: Mapping[str, Any], seeds: Sequence[int]) -> float:
    """Squared errors of each kind's final pass rate, of the final mean over every prompt, and of the majority's
    share of the groups trained after the exploration, over the fitted selections."""
    loss = 0.0
    for selection, waves in FITTED:
        name = f"{selection}/{waves}"
        sim = simulated_figures(world, selection, waves, seeds)
        want = measured["final"][name]
        loss += (sim["kind_0_final_pass_rate"] - want[0]) ** 2 + (sim["kind_1_final_pass_rate"] - want[1]) ** 2
        loss += (sim["final_mean_pass_rate"] - measured["final_all"][name]) ** 2
        loss += (sim[f"kind_0_share_of_trained_after_step_{EXPLORATION_STEPS}"]
                 - measured["goal_first_share_of_trained_after_10"][name]) ** 2
    return loss


def fit_dynamics(base: WorldParams, measured: Mapping[str, Any] = LEARNER_MEASURED,
                 seeds: Sequence[int] = TUNING_SEEDS, grid: Mapping[str, Sequence[float]] = DYNAMICS_GRID
                 ) -> list[dict[str, Any]]:
    """Every grid point's loss, best first.  For each spread of difficulties the kinds' means are set so that their
    untrained mean pass rates are the measured ones (:func:`kind_means`): the learner's per-task success is bimodal,
    which a logit-normal fits only with a wide spread (:func:`fit_difficulties`), and that spread hides the
    selection's pull toward one kind; the dynamics choose it instead."""
    rows = []
    names = list(grid)
    for values in itertools.product(*(grid[k] for k in names)):
        point = dict(zip(names, values))
        means = kind_means(point.get("difficulty_sd", base.difficulty_sd), measured["untrained"])
        world = replace(base, **point, **means)
        rows.append({**point, **means, "loss": dynamics_loss(world, measured, seeds)})
    return sorted(rows, key=lambda r: r["loss"])


def ranking(world: WorldParams, seeds: Sequence[int], steps: int = STEPS) -> dict[str, float]:
    """Each ranked selection's median final mean pass rate (the simulator's held-out success)."""
    return {f"{sel}/{waves}": simulated_figures(world, sel, waves, seeds, steps)["final_mean_pass_rate"]
            for sel, waves in RANKED}


def rank_agrees(simulated: Mapping[str, float], learner_by_seed: Mapping[str, Sequence[float]],
                tie: float = 0.01) -> dict[str, Any]:
    """Whether the simulator orders every pair of selections the learner separates as the learner does.

    The learner's order of a pair is the sign of the median of its per-seed differences (paired by seed, as the
    benchmark pairs them).  The learner *separates* a pair when that median exceeds ``tie`` and every per-seed
    difference but at most one has its sign; a pair it does not separate may come in either order (one seed of a
    30-step run moves held-out success by several points).  Returns the pairs in another order, and every pair's
    figures (``strict``: whether the simulator's order matches the medians' order, separated or not).
    """
    wrong, pairs = [], {}
    for a, b in itertools.combinations(sorted(learner_by_seed), 2):
        diffs = [x - y for x, y in zip(learner_by_seed[a], learner_by_seed[b])]
        gap, sim = median(diffs), simulated[a] - simulated[b]
        agreeing = sum(1 for d in diffs if d * gap > 0)
        separated = abs(gap) > tie and agreeing >= len(diffs) - 1
        pairs[f"{a} - {b}"] = {"learner": gap, "simulated": sim, "separated": separated, "strict": sim * gap > 0}
        if separated and sim * gap <= 0:
            wrong.append({"pair": [a, b], "learner": gap, "simulated": sim})
    return {"agrees": not wrong, "disagreements": wrong, "tie": tie, "pairs": pairs,
            "strict_agrees": all(p["strict"] for p in pairs.values())}


#: The learner's held-out success after 30 steps per run on the report seeds 0-14, one run each (the evaluation at
#: step 30 in ``benchmarks/results/selection.json``, products_2000: the skip rule skipping runs of solved groups
#: three turns in four after one, with its importance weight, adaptive waves counting its skips; val+test, 16 episodes
#: per task; in seed order): the order the simulator must reproduce after its 30 steps, each run paired with
#: seed/fixed's of the same seed.  Equal steps, not the judge's equal episodes: the world is fitted to 30-step runs,
#: and with adaptive waves 30 steps spend fewer episodes.
LEARNER_FINAL_BY_SEED: dict[str, tuple[float, ...]] = {
    "seed/fixed": (0.88125, 0.882812, 0.875, 0.8875, 0.878125, 0.879687, 0.873437, 0.876563, 0.88125, 0.878125, 0.8875, 0.860938, 0.870313, 0.879687, 0.871875),
    "spread/fixed": (0.742188, 0.78125, 0.75625, 0.76875, 0.767188, 0.71875, 0.75, 0.75, 0.804688, 0.745313, 0.707812, 0.782813, 0.7375, 0.757812, 0.776563),
    "spread/adaptive": (0.7125, 0.760938, 0.679688, 0.753125, 0.7125, 0.753125, 0.767188, 0.76875, 0.773438, 0.778125, 0.740625, 0.698438, 0.732812, 0.789062, 0.698438),
    "skip/fixed": (0.8875, 0.8875, 0.882812, 0.876563, 0.884375, 0.878125, 0.870313, 0.892188, 0.876563, 0.878125, 0.86875, 0.86875, 0.89375, 0.834375, 0.871875),
    "skip/adaptive": (0.876563, 0.829688, 0.815625, 0.89375, 0.8875, 0.88125, 0.8375, 0.871875, 0.878125, 0.884375, 0.88125, 0.86875, 0.8875, 0.878125, 0.884375),
}
