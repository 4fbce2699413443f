"""The skill model behind informative selection: its Laplace update, its quadrature and its bookkeeping."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling.estimate import (
    SkillModel,
    gaussian_pass_rate,
    gaussian_zero_spread,
    laplace_binomial,
    sigmoid,
    zero_spread_probability,
)


def test_quadrature_matches_monte_carlo():
    rng = random.Random(0)
    draws = [rng.gauss(1.2, 1.5) for _ in range(200_000)]
    mc_zero = sum(zero_spread_probability(sigmoid(x), 8) for x in draws) / len(draws)
    mc_pass = sum(sigmoid(x) for x in draws) / len(draws)
    assert gaussian_zero_spread(1.2, 1.5**2, 8) == pytest.approx(mc_zero, abs=0.005)
    assert gaussian_pass_rate(1.2, 1.5**2) == pytest.approx(mc_pass, abs=0.005)
    assert gaussian_zero_spread(0.7, 0.0, 8) == pytest.approx(zero_spread_probability(sigmoid(0.7), 8))


@settings(max_examples=300, deadline=None)
@given(mean=st.floats(-6, 6), sd=st.floats(0.2, 5), k=st.integers(0, 8))
def test_laplace_mode_is_the_posterior_mode(mean, sd, k):
    """The mode found by Newton's method maximises the log-posterior, to within a step of ``(12 sd + 6) / 4000``.

    The log-posterior (a Gaussian prior times a logistic binomial likelihood) is strictly concave, so a point
    no lower than both neighbours one step away is within one step of the maximum: three evaluations prove
    what a 4,001-point grid over mean +- (6 sd + 3) did.  300 examples find plain Newton's cycles (without
    the bracket's safeguard) every time; the two found first are pinned below.
    """
    var = sd * sd

    def log_post(x: float) -> float:
        p = min(max(sigmoid(x), 1e-300), 1 - 1e-16)
        return -((x - mean) ** 2) / (2 * var) + k * math.log(p) + (8 - k) * math.log(1 - p)

    mode, post_var = laplace_binomial(mean, var, k, 8)
    step = (12 * sd + 6) / 4000
    assert log_post(mode) >= max(log_post(mode - step), log_post(mode + step))
    assert 0 < post_var < var  # evidence only sharpens the belief


def test_an_all_pass_group_moves_the_prompt_below_the_skill_and_shrinks_its_uncertainty():
    model = SkillModel(2)
    model.observe(0, False, 8.0, 8)
    mean, var = model.logit(0, True)
    assert mean > 2.0 and var < model.prior_var
    assert model.zero_spread(0, True, 8) > 0.5  # predicted to agree again


def test_a_well_known_prompt_that_suddenly_passes_moves_the_skill_not_only_itself():
    model = SkillModel(1)
    for _ in range(10):
        model.observe(0, True, 4.0, 8)
    skill_before = model.skill_mean
    model.observe(0, True, 8.0, 8)
    assert model.skill_mean > skill_before


def test_state_round_trip_and_length_check():
    model = SkillModel(3)
    model.observe(1, False, 3.0, 8)
    other = SkillModel(3)
    other.load_state_dict(model.state_dict())
    assert other.state_dict() == model.state_dict()
    with pytest.raises(ValueError, match="entries for 4 prompts"):
        SkillModel(4).load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="prior_sd"):
        SkillModel(1, prior_sd=0.0)


@pytest.mark.parametrize(("mean", "sd", "k", "mode"), [(3.0, 4.0, 5, 0.5920), (-5.0, 1.21875, 8, 0.2379)])
def test_laplace_cases_where_plain_newton_cycles(mean, sd, k, mode):
    """Both cycled between the ends of the bracket before the safeguard (found by the property test above)."""
    assert laplace_binomial(mean, sd * sd, k, 8)[0] == pytest.approx(mode, abs=1e-4)
