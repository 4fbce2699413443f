"""Staged siblings (R29, opt-in): the rule by example, one named test per branch; the step object's first-stage
event; and, over random completion orders, the properties that keep the seed's counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.defaults import DEFAULT_STAGE_THRESHOLD
from shopsimrl.sampling import (
    REASON_ZERO_STD,
    ConsecutiveFailureGuard,
    ControllerStateError,
    Decision,
    GroupDecision,
    Verdict,
)
from shopsimrl.sampling.adaptive import AdaptiveWaves
from shopsimrl.sampling.modes import Siblings
from shopsimrl.sampling.source import new_selector
from shopsimrl.sampling.staged import Next, StagedSiblings, after_first_stage, default_stage_size, rest_spread_chance
from shopsimrl.sampling.step import (
    AbortRest,
    AdaptiveRefills,
    FixedWaves,
    RolloutStep,
    Start,
    StoppedEarly,
    WaveOpened,
)

N = 8
SURE_FAIL = (-12.0, 0.01)  # a prompt predicted near 0%: logit mean and variance
SURE_PASS = (12.0, 0.01)
HALF = (0.0, 0.01)  # a prompt predicted near 50%


def logit_of(p: float) -> float:
    return math.log(p / (1.0 - p))


def symmetric_formula(p: float, k: int = 4) -> float:
    """The issue's chance that the rest breaks an agreement of the first k, for a known p (both directions)."""
    a, b = p**k, (1.0 - p) ** k
    return (a * (1.0 - a) + b * (1.0 - b)) / (a + b)


# -- the chance the rest breaks the agreement -----------------------------------------------------------------------
@pytest.mark.parametrize("p, expected", [(0.97, 0.11), (0.9, 0.34)])
def test_r29_a_known_pass_rate_gives_the_issues_figures(p, expected):
    chance = rest_spread_chance(logit_of(p), 0.0, 4, 8, successes=True)
    assert chance == pytest.approx(1.0 - p**4)
    assert chance == pytest.approx(symmetric_formula(p), abs=1e-3)
    assert round(chance, 2) == expected


def test_r29_the_chance_is_conditioned_on_the_outcomes_seen():
    # a wide prediction centred at 50%: four failures make a low pass rate likely, so the rest will most likely fail
    # too; the same four failures on a prompt known to pass half the time leave the rest free to succeed
    wide = rest_spread_chance(0.0, 9.0, 4, 8, successes=False)
    known = rest_spread_chance(0.0, 0.0, 4, 8, successes=False)
    assert known == pytest.approx(1.0 - 0.5**4)
    assert wide < 0.5 * known
    # the posterior average lies between the extremes of the known-p chance
    assert 0.0 < wide < 1.0
    # symmetric: four successes at +m are four failures at −m
    assert rest_spread_chance(2.0, 1.5, 4, 8, True) == pytest.approx(rest_spread_chance(-2.0, 1.5, 4, 8, False))


def test_r29_the_posterior_average_matches_a_fine_numerical_integral():
    mean, var, k, n = -1.0, 4.0, 4, 8
    sd, num, den, steps = math.sqrt(var), 0.0, 0.0, 20000
    for j in range(steps):  # a plain Riemann sum over ±10 sd
        z = -10.0 + 20.0 * (j + 0.5) / steps
        w = math.exp(-0.5 * z * z)
        p = 1.0 / (1.0 + math.exp(-(mean + sd * z)))
        num += w * (1 - p) ** k * (1.0 - (1 - p) ** (n - k))
        den += w * (1 - p) ** k
    assert rest_spread_chance(mean, var, k, n, successes=False) == pytest.approx(num / den, abs=2e-3)


# -- the rule, one branch per test ----------------------------------------------------------------------------------
def decide(first, remaining=20, target=16, logit=SURE_FAIL, threshold=DEFAULT_STAGE_THRESHOLD):
    return after_first_stage(first, n=N, remaining=remaining, target=target, logit=logit, threshold=threshold)[0]


def test_r29_first_k_disagree_the_rest_starts():
    assert decide([0.0, 1.0, 0.0, 0.0]) is Next.REST


def test_r29_an_unscored_sibling_among_the_first_k_the_rest_starts():
    assert decide([0.0, None, 0.0, 0.0]) is Next.REST


def test_r29_agreement_on_a_partial_reward_the_rest_starts():
    assert decide([0.5, 0.5, 0.5, 0.5]) is Next.REST


def test_r29_agreement_but_the_fallback_could_keep_the_group_the_rest_starts():
    assert decide([0.0] * 4, remaining=16, target=16) is Next.REST  # remaining <= target: never stopped
    assert decide([0.0] * 4, remaining=17, target=16) is Next.DROP


def test_r29_agreement_on_a_prompt_that_may_still_spread_the_rest_starts():
    assert decide([0.0] * 4, logit=HALF) is Next.REST
    assert decide([1.0] * 4, logit=SURE_FAIL) is Next.REST  # four successes on a prompt predicted to fail
    assert decide([0.0] * 4, logit=None) is Next.REST  # no prediction


def test_r29_agreement_predicted_certain_is_a_zero_std_drop_after_k():
    assert decide([0.0] * 4, logit=SURE_FAIL) is Next.DROP
    assert decide([1.0] * 4, logit=SURE_PASS) is Next.DROP


def test_r29_the_threshold_is_strict_and_bounds_the_chance():
    p = 0.97
    chance = 1.0 - p**4
    assert decide([1.0] * 4, logit=(logit_of(p), 0.0), threshold=chance + 1e-9) is Next.DROP
    assert decide([1.0] * 4, logit=(logit_of(p), 0.0), threshold=chance - 1e-9) is Next.REST
    assert decide([1.0] * 4, logit=SURE_PASS, threshold=0.0) is Next.REST  # threshold 0: staging never stops
    # at p = 0.5 exactly the chance is 1 − 0.5⁴ = 0.9375, exact in binary: a threshold equal to it does not stop
    assert after_first_stage([0.0] * 4, n=N, remaining=20, target=16, logit=(0.0, 0.0), threshold=0.9375) == \
        (Next.REST, 0.9375)


def test_r29_knobs_default_stage_size_is_half_and_bad_sizes_are_refused():
    assert default_stage_size(8) == 4 and default_stage_size(1) == 1
    assert StagedSiblings.of(8).first == range(4) and StagedSiblings.of(8).rest == range(4, 8)
    assert StagedSiblings.of(8, 3).rest == range(3, 8)
    for bad in (0, 8, 9):
        with pytest.raises(ValueError, match="stage size"):
            StagedSiblings(8, bad)
    with pytest.raises(ValueError, match="threshold"):
        StagedSiblings(8, 4, threshold=1.5)
    assert Siblings.parse("staged") is Siblings.STAGED
    with pytest.raises(ValueError, match="all, staged"):
        Siblings.parse("half")


# -- the step object ------------------------------------------------------------------------------------------------
PROMPTS = [f"p{i}" for i in range(40)]
STAGED = StagedSiblings.of(N)


class Known:
    """A selector wrapper whose predictions are set per prompt (the rest is the seed order's)."""

    def __init__(self, logit=SURE_FAIL, zero=0.9):
        self.inner = new_selector("seed", PROMPTS, N, 0)
        self.logit, self.zero = logit, zero

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def predicted_logit(self, prompt):
        return self.logit

    def predicted_zero_spread(self, prompt):
        return self.zero


def starts_of(actions):
    return [a for a in actions if isinstance(a, Start)]


def staged_step(target=2, wave=4, source=None, staging=STAGED, adaptive=False):
    source = source or Known()
    sizer = AdaptiveRefills(AdaptiveWaves(target, wave, -1.5), N) if adaptive else FixedWaves(N)
    return RolloutStep(target, wave, source=source, sizer=sizer, guard=ConsecutiveFailureGuard(8), staging=staging)


def test_r29_off_by_default_every_group_starts_whole():
    step = RolloutStep(2, 4, source=Known(), sizer=FixedWaves(N), guard=ConsecutiveFailureGuard(8))
    assert all(s.siblings == range(N) for s in starts_of(step.start()))
    assert step.stage_counts["staged"] == 0
    with pytest.raises(ControllerStateError, match="not in its first stage"):
        step.first_stage(0, [0.0] * 4)


def test_r29_a_staged_group_starts_its_first_k_and_a_prompt_predicted_to_spread_starts_whole():
    skipping = StagedSiblings.of(N, skip_q=0.5)
    starts = starts_of(staged_step(staging=skipping).start())
    assert [s.siblings for s in starts] == [range(4)] * 4
    whole = starts_of(staged_step(source=Known(zero=0.2), staging=skipping).start())  # q = 0.8 >= skip_q: staging skipped
    assert [s.siblings for s in whole] == [range(N)] * 4
    step = staged_step(source=Known(zero=0.2), staging=skipping)
    step.start()
    assert step.stage_counts == {"staged": 0, "whole": 4, "rest_started": 0, "stopped_early": 0, "episodes_saved": 0}


def test_r29_by_default_a_prompt_predicted_to_spread_starts_whole_and_one_predicted_to_agree_is_staged():
    assert StagedSiblings.of(N).skip_q == 0.5
    whole = staged_step(source=Known(zero=0.49))  # q = 0.51 >= the default skip_q (0.5): staging skipped
    assert [s.siblings for s in starts_of(whole.start())] == [range(N)] * 4
    assert whole.stage_counts["staged"] == 0 and whole.stage_counts["whole"] == 4
    staged = staged_step(source=Known(zero=0.51))  # q = 0.49 < 0.5: staged
    assert [s.siblings for s in starts_of(staged.start())] == [range(4)] * 4
    assert staged.stage_counts["staged"] == 4 and staged.stage_counts["whole"] == 0


def test_r29_the_step_decides_a_certain_agreement_as_the_seeds_zero_std_drop_after_k():
    step = staged_step()
    step.start()  # remaining 4 > target 2
    actions = step.first_stage(1, [0.0] * 4)
    assert actions == [StoppedEarly(1), GroupDecision(1, 1, Verdict.ZERO_STD, Decision.DROPPED, REASON_ZERO_STD, 3, 0)]
    assert step.stage_counts["stopped_early"] == 1 and step.stage_counts["episodes_saved"] == 4
    assert step.first_stage(0, [0.0] * 4)[0] == StoppedEarly(0)  # remaining 3 > 2: dropped too, remaining 2
    actions = step.first_stage(2, [0.0] * 4)  # remaining 2 == target: the fallback could keep it -> the rest
    assert actions == [Start(2, 1, step.prompts[2], range(4, 8), None)]
    with pytest.raises(ControllerStateError, match="first stage"):
        step.complete(3, Verdict.ZERO_STD, [0.0] * N)  # group 3 has not reported its first stage
    actions = step.complete(2, Verdict.ZERO_STD, [0.0] * N)
    assert actions[0].decision is Decision.FALLBACK
    done = step.close()
    assert done.stopped_early == [1, 0] and done.dropped[REASON_ZERO_STD] == [1, 0]


def test_r29_first_k_disagree_the_step_starts_the_rest_then_judges_the_whole_group():
    step = staged_step()
    step.start()
    assert step.first_stage(0, [0.0, 1.0, 0.0, 0.0]) == [Start(0, 1, step.prompts[0], range(4, 8), None)]
    actions = step.complete(0, Verdict.VARIED, [0.0, 1.0] + [0.0] * 6)
    assert actions[0].decision is Decision.ACCEPTED
    with pytest.raises(ControllerStateError):
        step.first_stage(0, [0.0] * 4)  # once per group


def test_r29_a_decision_after_k_never_takes_remaining_below_the_target():
    step = staged_step(target=4, wave=5)
    step.start()  # remaining 5
    actions = step.first_stage(0, [0.0] * 4)
    assert [a.remaining for a in actions if isinstance(a, GroupDecision)] == [4] and step.remaining == 4
    assert not [a for a in actions if isinstance(a, (Start, WaveOpened))]  # no new wave: 4 == target
    assert step.first_stage(1, [0.0] * 4) == [Start(1, 1, step.prompts[1], range(4, 8), None)]


def test_r29_groups_in_their_first_stage_are_aborted_at_target_kept():
    step = staged_step(source=Known(logit=HALF, zero=0.6))
    step.start()
    step.first_stage(0, [0.0, 1.0, 1.0, 1.0])
    step.first_stage(1, [0.0, 1.0, 1.0, 1.0])
    step.complete(0, Verdict.VARIED, [0.0] + [1.0] * 7)
    actions = step.complete(1, Verdict.VARIED, [0.0] + [1.0] * 7)
    assert actions[-1] == AbortRest((2, 3))
    assert step.close().aborted == [2, 3]


# -- random completion orders ---------------------------------------------------------------------------------------
def drive(step, supply, order, staged_on):
    """Run a step to its end: ``supply(index)`` gives a group's n rewards, ``order`` picks which job finishes next.

    Returns (decisions, siblings started per group, groups completed whole)."""
    started: dict[int, list[int]] = {}
    jobs: list[tuple[int, str]] = []  # (group, "first" | "whole") in flight
    decisions: list[GroupDecision] = []

    def act(actions):
        for a in actions:
            if isinstance(a, Start):
                started.setdefault(a.index, []).extend(a.siblings)
                jobs.append((a.index, "whole" if a.siblings.stop == N else "first"))
            elif isinstance(a, GroupDecision):
                decisions.append(a)
            elif isinstance(a, AbortRest):
                jobs.clear()

    act(step.start())
    draws = iter(order)
    while jobs:
        index, kind = jobs.pop(next(draws, 0) % len(jobs))
        rewards = supply(index)
        if kind == "first":
            act(step.first_stage(index, rewards[:4]))
        else:
            verdict = Verdict.VARIED if max(rewards) > min(rewards) else Verdict.ZERO_STD
            act(step.complete(index, verdict, rewards))
    return decisions, started, step.close()


@st.composite
def worlds(draw):
    target = draw(st.integers(1, 4))
    wave = draw(st.integers(target, 8))
    pass_rates = draw(st.lists(st.sampled_from([0.0, 0.02, 0.5, 0.98, 1.0]), min_size=40, max_size=40))
    seed = draw(st.integers(0, 10**6))
    order = draw(st.lists(st.integers(0, 1000), max_size=400))
    adaptive = draw(st.booleans())
    return target, wave, pass_rates, seed, order, adaptive


def supply_of(pass_rates, seed):
    import random

    rng = random.Random(seed)
    cache: dict[int, list[float]] = {}

    def supply(index):
        if index not in cache:
            p = pass_rates[index % len(pass_rates)]
            cache[index] = [1.0 if rng.random() < p else 0.0 for _ in range(N)]
        return cache[index]

    return supply


@settings(max_examples=100, deadline=None)
@given(worlds())
def test_r29_every_group_the_trainer_sees_is_whole_and_every_early_stop_is_a_seed_zero_std_drop(world):
    target, wave, pass_rates, seed, order, adaptive = world
    step = staged_step(target, wave, source=Known(logit=SURE_FAIL, zero=0.9), adaptive=adaptive,
                       staging=StagedSiblings(N, 4, threshold=1.0))  # threshold 1: stop at every chance
    decisions, started, done = drive(step, supply_of(pass_rates, seed), order, True)
    early = set(done.stopped_early)
    for d in decisions:
        if d.index in early:
            # the seed's rule for this group: zero-std with remaining > target before it, so dropped, remaining − 1
            assert d.decision is Decision.DROPPED and d.reason == REASON_ZERO_STD
            assert d.remaining + 1 > target
            assert sorted(started[d.index]) == list(range(4))
        else:
            assert sorted(started[d.index]) == list(range(N)), "a group judged whole had all n siblings"
    for i in done.kept:
        assert sorted(started[i]) == list(range(N))
    assert done.dropped[REASON_ZERO_STD] == [d.index for d in decisions
                                            if d.decision is Decision.DROPPED and d.reason == REASON_ZERO_STD]
    assert step.stage_counts["stopped_early"] == len(early)
    assert step.stage_counts["episodes_saved"] == 4 * len(early)
    assert len(done.kept) == target  # the supply never runs dry: every step fills its batch


@settings(max_examples=60, deadline=None)
@given(worlds())
def test_r29_staging_that_never_stops_makes_the_seeds_decisions(world):
    """Threshold 0: every group runs whole (in two stages); when the wholes finish in the same order, the
    decisions are the unstaged step's, decision for decision."""
    target, wave, pass_rates, seed, order, adaptive = world
    supply = supply_of(pass_rates, seed)
    staged = staged_step(target, wave, adaptive=adaptive, staging=StagedSiblings(N, 4, threshold=0.0))
    plain = staged_step(target, wave, adaptive=adaptive, staging=None)
    got = drive_whole_order(staged, supply, order)
    want = drive_whole_order(plain, supply, order)
    assert got == want


def drive_whole_order(step, supply, order):
    """Like ``drive``, but a first stage is reported as soon as it starts (the rest starts at once): the wholes
    then finish in the order ``order`` picks among groups, as in the unstaged step."""
    decisions: list[GroupDecision] = []
    jobs: list[int] = []

    def act(actions):
        for a in actions:
            if isinstance(a, Start):
                if a.siblings == range(4):
                    act(step.first_stage(a.index, supply(a.index)[:4]))
                else:
                    jobs.append(a.index)
            elif isinstance(a, GroupDecision):
                decisions.append(a)
            elif isinstance(a, AbortRest):
                jobs.clear()

    act(step.start())
    draws = iter(order)
    while jobs:
        index = jobs.pop(next(draws, 0) % len(jobs))
        rewards = supply(index)
        act(step.complete(index, Verdict.VARIED if max(rewards) > min(rewards) else Verdict.ZERO_STD, rewards))
    done = step.close()
    return decisions, done.kept, done.dropped, done.aborted
