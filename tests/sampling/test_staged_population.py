"""Staged siblings (R29): a never-seen prompt's predicted logit is the population that recent first tries show
(an empirical-Bayes prior that follows training), not the wide prior a first group is placed with."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling.estimate import PRIOR_SD, fit_population
from shopsimrl.sampling.evidence import POPULATION_FIT_DECAY, POPULATION_FIT_MIN_GROUPS
from shopsimrl.sampling.selector import RuleSelector
from shopsimrl.sampling.source import new_selector, selector_from_state
from shopsimrl.sampling.staged import rest_spread_chance

N = 8


def draw_groups(mean: float, sd: float, count: int, seed: int = 0) -> dict[tuple[int, int], float]:
    """``count`` groups of ``N`` siblings, each of a prompt whose logit is drawn from ``N(mean, sd²)``."""
    rng = random.Random(seed)
    counts: dict[tuple[int, int], float] = {}
    for _ in range(count):
        p = 1.0 / (1.0 + math.exp(-rng.gauss(mean, sd)))
        k = sum(rng.random() < p for _ in range(N))
        counts[(N, k)] = counts.get((N, k), 0.0) + 1.0
    return counts


def first_tries(source: RuleSelector, outcomes: list[list[float]]) -> None:
    """Start and record one first group per outcome (each on a prompt never seen before)."""
    for rewards in outcomes:
        (prompt,) = source.next_prompts(1)
        source.record(prompt, rewards)


def test_r29_fit_population_recovers_a_known_population():
    mean, var = fit_population(draw_groups(2.0, 3.0, 4000))
    assert mean == pytest.approx(2.0, abs=0.5)
    assert math.sqrt(var) == pytest.approx(3.0, abs=0.75)
    mean, var = fit_population(draw_groups(-1.0, 1.0, 4000, seed=1))
    assert mean == pytest.approx(-1.0, abs=0.5)
    assert math.sqrt(var) == pytest.approx(1.0, abs=0.5)


def test_r29_fit_population_counts_what_a_group_decided_after_k_showed():
    whole = draw_groups(0.0, 2.0, 2000)
    stopped = {**whole, (4, 4): 600.0}  # 600 more groups stopped after 4 agreeing successes
    assert fit_population(stopped)[0] > fit_population(whole)[0] + 0.5


def test_r29_a_never_seen_prompts_logit_is_the_wide_prior_until_enough_first_tries():
    source = new_selector("seed", range(200), N, 0)
    first_tries(source, [[1.0] * N] * (math.ceil(POPULATION_FIT_MIN_GROUPS) - 1))
    (fresh,) = source.next_prompts(1)
    mean, var = source.predicted_logit(fresh)  # too few: at the skill, wide (the prior plus the skill's drift)
    assert mean == 0.0 and PRIOR_SD**2 <= var < PRIOR_SD**2 + 0.1
    first_tries(source, [[1.0] * N] * 3)  # the decayed count passes POPULATION_FIT_MIN_GROUPS
    assert sum(source.evidence.first_tries.values()) >= POPULATION_FIT_MIN_GROUPS
    (fresh,) = source.next_prompts(1)
    assert source.predicted_logit(fresh)[0] > 2.0  # enough: the population of first tries


def test_r29_a_never_seen_prompts_logit_follows_recent_first_tries():
    # late in a run: the policy passes most prompts (logits ~ N(3, 3²)); 300 first tries of such prompts
    rng = random.Random(7)
    rates = [1.0 / (1.0 + math.exp(-rng.gauss(3.0, 3.0))) for _ in range(300)]
    source = new_selector("seed", range(400), N, 0)
    first_tries(source, [[float(rng.random() < p) for _ in range(N)] for p in rates])
    (fresh,) = source.next_prompts(1)
    mean, var = source.predicted_logit(fresh)
    assert mean == pytest.approx(3.0, abs=0.75) and math.sqrt(var) == pytest.approx(3.0, abs=1.0)
    # four agreeing successes on a new prompt: the wide prior says the rest breaks them 0.26 of the time (always
    # above the threshold or always below it); the population's answer is the true one for such a prompt
    truth = sum(p**4 * (1.0 - p**4) for p in rates) / sum(p**4 for p in rates)
    assert rest_spread_chance(0.0, PRIOR_SD**2, 4, N, successes=True) == pytest.approx(0.261, abs=1e-3)
    assert rest_spread_chance(mean, var, 4, N, successes=True) == pytest.approx(truth, abs=0.04)
    assert abs(truth - 0.261) > 0.08


def test_r29_old_first_tries_fade():
    source = new_selector("seed", range(1000), N, 0)
    first_tries(source, [[0.0] * N] * 400 + [[1.0] * N] * 400)  # the policy learned: recent first tries pass
    (fresh,) = source.next_prompts(1)
    assert source.predicted_logit(fresh)[0] > 2.0
    assert POPULATION_FIT_DECAY < 1.0


def test_r29_an_observed_prompts_logit_is_the_skill_models():
    source = new_selector("seed", range(100), N, 0)
    first_tries(source, [[1.0] * N] * 40)
    prompt = 0 if 0 in source.ever_chosen() else source.ever_chosen()[0]
    assert source.predicted_logit(prompt) == source.evidence.model.logit(prompt, True)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([4, N]), st.integers(0, N)), min_size=0, max_size=60))
def test_r29_first_tries_survive_a_checkpoint_and_their_weight_decays(tries):
    source = new_selector("seed", range(100), N, 0)
    first_tries(source, [[1.0] * min(k, n) + [0.0] * (n - min(k, n)) for n, k in tries])
    restored = selector_from_state(source.state_dict())
    (fresh,) = source.next_prompts(1)
    restored.next_prompts(1)
    assert restored.predicted_logit(fresh) == source.predicted_logit(fresh)
    assert restored.state_dict() == source.state_dict()
    # every first try weighs POPULATION_FIT_DECAY ** (first tries since)
    weight = sum(POPULATION_FIT_DECAY**age for age in range(len(tries)))
    assert sum(source.evidence.first_tries.values()) == pytest.approx(weight)
