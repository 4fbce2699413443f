"""Adaptive wave sizing: the Poisson-binomial tail and the refill rule; WaveController.refill."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling import ControllerStateError, Decision, WaveController
from shopsimrl.sampling.adaptive import AdaptiveWaves, prob_at_least


@settings(max_examples=80, deadline=None)
@given(qs=st.lists(st.floats(0, 1), max_size=7), k=st.integers(0, 8))
def test_tail_matches_enumeration(qs, k):
    exact = 0.0
    for outcome in itertools.product((0, 1), repeat=len(qs)):
        if sum(outcome) >= k:
            exact += math.prod(q if o else 1 - q for q, o in zip(qs, outcome))
    assert prob_at_least(qs, k) == pytest.approx(exact, abs=1e-12)


def test_refill_keeps_the_predicted_number_plus_the_cushion_and_respects_the_cap():
    rule = AdaptiveWaves(target=16, max_in_flight=32, cushion=0.5)
    assert rule.refill_size(0, [], lambda j: 1.0) == 17  # certain groups: what is missing plus the cushion
    add = rule.refill_size(0, [], lambda j: 0.8)
    assert 0.8 * add >= 16.5 > 0.8 * (add - 1)  # expected informative in flight: missing + cushion
    assert rule.refill_size(0, [], lambda j: 0.1) == 32  # hopeless: the budget (one wave) binds
    assert rule.refill_size(0, [0.1] * 16, lambda j: 0.1, submitted=32) == 0  # budget spent: the fallback's turn
    assert rule.refill_size(2, [0.1] * 10, lambda j: 0.1, submitted=40) == 4  # but never remaining < target
    assert rule.refill_size(10, [0.99] * 7, lambda j: 0.5) == 0  # 6.93 expected >= 6 missing + 0.5
    assert rule.refill_size(10, [0.9] * 7, lambda j: 0.5) == 1  # 6.3 < 6.5: one small top-up
    assert rule.refill_size(16, [], lambda j: 0.5) == 0  # done
    assert rule.refill_size(12, [0.0], lambda j: 1.0) == 5  # remaining >= target, then the cushion
    assert AdaptiveWaves(16, 32, cushion=0.0).refill_size(12, [], lambda j: 1.0) == 4  # no cushion: just the missing


@pytest.mark.parametrize("cushion", [float("-inf"), float("inf"), float("nan")])
def test_cushion_must_be_a_finite_count(cushion):
    with pytest.raises(ValueError, match="cushion"):
        AdaptiveWaves(16, 32, cushion=cushion)


def test_controller_refill_is_a_small_wave_with_the_same_rules():
    ctrl = WaveController(rollout_batch_size=2, over_sampling_batch_size=4)
    assert ctrl.refill(3) == range(0, 3)
    assert (ctrl.waves, ctrl.remaining) == (1, 3)
    assert ctrl.complete(0, "zero_std").decision is Decision.DROPPED  # remaining 3 > 2
    assert ctrl.complete(1, "zero_std").decision is Decision.FALLBACK  # remaining 2 <= 2: the fallback
    assert ctrl.refill(1) == range(3, 4)
    assert ctrl.wave_of(3) == 2
    assert ctrl.complete(3, "varied").decision is Decision.ACCEPTED
    assert ctrl.done and ctrl.abort() == [2]
    with pytest.raises(ControllerStateError):
        ctrl.refill(1)
    with pytest.raises(ValueError, match=">= 1"):
        WaveController(2, 4).refill(0)


def test_a_negative_cushion_keeps_fewer_in_flight_but_never_fewer_than_are_missing():
    rule = AdaptiveWaves(target=16, max_in_flight=32, cushion=-1.5)
    assert rule.refill_size(0, [], lambda j: 1.0) == 16  # certain groups: exactly the missing number
    assert rule.refill_size(0, [], lambda j: 0.5) == 29  # 0.5 each: 14.5 expected, 1.5 short of the 16 missing
    assert rule.refill_size(15, [], lambda j: 0.1) == 1  # one missing: one group, whatever its chance
    assert rule.refill_size(15, [0.1], lambda j: 0.1) == 0


def test_choose_returns_what_the_refill_rule_picked_with_each_q():
    rule = AdaptiveWaves(target=16, max_in_flight=32, cushion=-1.5)
    items = iter(range(100))
    picks = rule.choose(0, [], lambda: (next(items), 0.5))
    assert picks == [(i, 0.5) for i in range(rule.refill_size(0, [], lambda j: 0.5))] and len(picks) == 29
    assert rule.choose(16, [], lambda: (next(items), 0.5)) == []


def test_skipped_turns_count_against_the_budget_as_started_groups_do():
    """The pace: each turn the source skips costs the step's budget (one wave of turns) what a group costs, so a
    skip saves episodes instead of speeding the epoch passes; the missing groups are still always started."""
    rule = AdaptiveWaves(target=16, max_in_flight=32, cushion=-1.5)
    skipped = 0

    def next_chance(_j: int) -> float:
        nonlocal skipped
        skipped += 1  # every pick skips one turn of the order before it
        return 0.1

    assert rule.refill_size(0, [], next_chance, skipped=lambda: skipped) == 16  # 16 picks + 16 skips: the wave
    assert rule.refill_size(0, [], lambda j: 0.1, skipped=lambda: 10) == 22  # 10 skipped already this step
    assert rule.refill_size(0, [], lambda j: 0.1, skipped=lambda: 40) == 16  # spent: still never below the target
    assert rule.refill_size(0, [], lambda j: 0.1) == 32  # no skips: the whole wave, as before


def test_an_adaptive_step_over_a_skipping_source_walks_at_most_one_wave_of_turns():
    """End to end with the skip rule: every prompt solved, GRESO's halving and half of each pass skipped at
    most; a step's groups started plus turns skipped stay within over_sampling_batch_size (the seed order's pace)."""
    walked, skips = _walk_solved_pass(max_skip_share=0.5, retry_base=0.5)
    assert skips[0] > 0 and sum(skips) == 32  # half the pass skipped, the pass's share
    assert walked == [16] * 4  # each step a wave of turns: started and skipped


def test_an_adaptive_step_walks_past_its_wave_only_to_start_the_target():
    """With the rule's defaults under adaptive waves (three quarters of a pass may be skipped, a solved group skips
    three turns in four) a step can spend its budget on skips before it has started the target; it then starts
    the target and no more, walking past its wave by the turns skipped on the way."""
    from shopsimrl.sampling.skip import skip_share_for_waves

    walked, skips = _walk_solved_pass(max_skip_share=skip_share_for_waves("adaptive"))
    started = [w - s for w, s in zip(walked, skips)]
    assert max(walked) > 16  # past the wave ...
    assert all(n == 4 for w, n in zip(walked, started) if w > 16)  # ... only to start the target
    assert sum(skips) <= 0.75 * 64 + 0.75 * 64  # at most the share of each pass begun (two here)


def _walk_solved_pass(**options: float) -> tuple[list[int], list[int]]:
    """Four adaptive steps (target 4, wave 16) over 64 prompts each solved once: turns walked and skipped per step."""
    from shopsimrl.sampling.skip import SkipOrder
    from shopsimrl.sampling.step import Start, new_step

    prompts = [f"p{i}" for i in range(64)]
    source = SkipOrder(prompts, 4, seed=1, **options)
    for batch in (source.next_prompts(32), source.next_prompts(32)):  # a first pass: every prompt solved once
        for p in batch:
            source.record(p, [1.0] * 4)
    walked, skips = [], []
    for _ in range(4):
        before = source.skipped_turns
        step = new_step(4, 16, 4, source=source, waves="adaptive")
        started = [a for a in step.start() if isinstance(a, Start)]
        flying = [s.index for s in started]
        while flying and not step.done:
            for a in step.finished([(flying.pop(0), "zero_std", [1.0] * 4)]):
                if isinstance(a, Start):
                    started.append(a)
                    flying.append(a.index)
        step.close()
        walked.append(len(started) + source.skipped_turns - before)
        skips.append(source.skipped_turns - before)
    return walked, skips
