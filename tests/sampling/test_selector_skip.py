"""The skip rule (``SkipOrder``): the seed's order, prompts on a run of solved groups skipped
with a floor, at most one hand-out per epoch pass, a skip budget per pass (the wave mode's), never a loop."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling.selector_script import drive as drive_script

from shopsimrl.sampling.skip import (
    ADAPTIVE_MAX_SKIP_SHARE,
    MAX_SKIP_SHARE,
    RETRY_BASE,
    RETRY_FLOOR,
    SkipOrder,
    skip_share_for_waves,
)
from shopsimrl.sampling.source import new_selector, selector_from_state

SOLVED = [1.0] * 8
FAILED = [0.0] * 8
PARTIAL = [0.5] * 8
VARIED = [1.0, 0.0] * 4


def ids(size: int) -> list[str]:
    return [f"p{i}" for i in range(size)]


def walk(source, k: int, steps: int, outcome) -> list[list[str]]:
    """``steps`` calls of ``next_prompts(k)``, each prompt recorded with ``outcome(prompt)`` before the next call."""
    trace = []
    for _ in range(steps):
        batch = source.next_prompts(k)
        trace.append(batch)
        for pid in batch:
            source.record(pid, outcome(pid))
    return trace


def test_with_nothing_to_skip_it_hands_out_exactly_the_seed_order():
    """Every group has spread: no prompt is ever on a run, so the rule is the seed order, prompt for prompt."""
    inf, seed = new_selector("skip", ids(50), 8, 7), new_selector("seed", ids(50), 8, 7)
    assert walk(inf, 9, 30, lambda _: VARIED) == walk(seed, 9, 30, lambda _: VARIED)
    assert inf.epoch == seed.epoch == 6


def test_a_prompt_on_a_run_of_solved_groups_is_skipped_and_others_are_not():
    source = SkipOrder(ids(300), 8, seed=0)
    solved = set(ids(300)[:100])
    walk(source, 300, 1, lambda p: SOLVED if p in solved else VARIED)  # first pass: everything tried once
    assert source.pop_stats()["skipped"] == 0  # a prompt never observed is never skipped
    second = walk(source, 150, 1, lambda p: SOLVED if p in solved else VARIED)[0]
    stats = source.pop_stats()
    assert stats["skipped"] > 0 and source.skipped_turns == stats["skipped"]
    assert solved & set(second) and len(solved & set(second)) < 100 * 150 / 300  # fewer than the seed order's share
    assert all(source.evidence.solved_streak[source.evidence.index(p)] == 0 for p in set(second) - solved)
    # the skip probability grows with the run and stops at the floor
    i = source.evidence.index(next(iter(solved)))
    probabilities = []
    for run in range(1, 8):
        source.evidence.solved_streak[i] = run
        probabilities.append(source.skip_probability(i))
    assert probabilities == sorted(probabilities) and probabilities[0] == pytest.approx(1.0 - RETRY_BASE)
    assert max(probabilities) == pytest.approx(1.0 - RETRY_FLOOR)
    assert source.skip_probability(source.evidence.index(ids(300)[150])) == 0.0  # last group had spread


def test_a_prompt_on_a_run_of_failed_or_partial_groups_is_never_skipped():
    """A learning policy leaves failed prompts behind, not solved ones: only a run of solved groups is skipped.  A
    failed (or partly right) group in between ends the run."""
    source = SkipOrder(ids(30), 8, seed=5, max_skip_share=1.0)
    fates = {"p0": FAILED, "p1": PARTIAL}
    for _ in range(6):
        walk(source, 30, 1, lambda p: fates.get(p, VARIED))
    for p in ("p0", "p1"):
        i = source.evidence.index(p)
        assert source.evidence.solved_streak[i] == 0 and source.skip_probability(i) == 0.0
    assert source.skipped_turns == 0
    i = source.evidence.index("p2")
    for rewards, run in ((SOLVED, 1), (SOLVED, 2), (FAILED, 0), (SOLVED, 1)):
        source.evidence.observe(i, rewards)
        assert source.evidence.solved_streak[i] == run


def test_skipped_turns_count_every_skip_and_survive_a_checkpoint():
    source = SkipOrder(ids(40), 8, seed=6, max_skip_share=1.0)
    walk(source, 10, 8, lambda _: SOLVED)
    skipped = source.skipped_turns
    assert skipped > 0
    copy = selector_from_state(json.loads(json.dumps(source.state_dict())))
    assert copy.skipped_turns == skipped
    assert walk(copy, 10, 5, lambda _: SOLVED) == walk(source, 10, 5, lambda _: SOLVED)
    assert copy.skipped_turns == source.skipped_turns >= skipped
    assert new_selector("seed", ids(40), 8).skipped_turns == 0  # a rule that never skips


def test_the_skip_share_of_a_pass_is_the_wave_mode_s():
    """Fixed waves start a whole wave however much they skip (a third bounds the pace); adaptive waves count skips
    against the step's budget, so a pass may skip three quarters."""
    assert skip_share_for_waves("fixed") == MAX_SKIP_SHARE == pytest.approx(1 / 3)
    assert skip_share_for_waves("adaptive") == ADAPTIVE_MAX_SKIP_SHARE == 0.75
    assert new_selector("skip", ids(9), 8, waves="adaptive").max_skip_share == 0.75
    assert new_selector("skip", ids(9), 8).max_skip_share == MAX_SKIP_SHARE


def test_a_skipped_prompt_is_retried_at_least_at_the_floor():
    """A prompt that is always solved keeps coming back, at about the floor's rate per pass, never less."""
    size = 60
    source = SkipOrder(ids(size), 8, seed=3, max_skip_share=1.0)
    counts: Counter[str] = Counter()
    for batch in walk(source, 6, 2000, lambda _: SOLVED):
        counts.update(batch)
    passes = source.epoch
    assert passes > 100
    rate = min(counts.values()) / passes
    assert rate >= 0.5 * RETRY_FLOOR  # every prompt, not only on average
    assert sum(counts.values()) / (size * passes) == pytest.approx(RETRY_FLOOR, abs=0.05)


def test_a_pass_skips_at_most_a_third_of_the_prompts():
    """The pace bound: with every prompt solved, every pass still hands out two thirds of the prompt set."""
    size = 90
    source = SkipOrder(ids(size), 8, seed=1)
    skipped_per_pass: list[int] = []
    begin = source._new_epoch

    def ending() -> None:
        if source.epoch:
            skipped_per_pass.append(source.position()["skipped"])
        begin()

    source._new_epoch = ending  # type: ignore[method-assign]
    walk(source, 10, 60, lambda _: SOLVED)
    assert len(skipped_per_pass) >= 5
    assert skipped_per_pass[0] == 0  # the first pass: nothing observed, nothing skipped
    assert max(skipped_per_pass) == int(MAX_SKIP_SHARE * size) == 30  # the budget binds, and holds


def test_when_every_free_prompt_would_be_skipped_the_next_pass_begins_and_k_are_returned():
    """No floor, no budget: every observed prompt is skipped; the call still returns k, from the pass it began."""
    source = SkipOrder(ids(12), 8, seed=2, retry_floor=0.0, retry_base=0.0, max_skip_share=1.0)
    walk(source, 12, 1, lambda _: SOLVED)
    before = source.epoch
    batch = source.next_prompts(5)
    assert len(set(batch)) == 5
    assert source.epoch == before + 1  # one pass begun, not an endless walk
    assert source.pop_stats()["rechecked"] == 5  # each a re-try of a prompt the pass skipped


def test_a_prompt_the_model_predicts_to_spread_is_not_skipped():
    source = SkipOrder(ids(40), 8, seed=0)
    walk(source, 40, 1, lambda p: SOLVED if p == "p0" else VARIED)
    i = source.evidence.index("p0")
    assert source.skip_probability(i) > 0.0
    source.evidence.model.mean[i] = source.skill  # the policy caught up with it: pass rate near 50%
    source.evidence.model.var[i] = 0.01
    assert source.skip_probability(i) == 0.0


def test_a_released_prompt_is_consumed_and_comes_back_with_its_next_pass():
    source = SkipOrder(ids(10), 8, seed=4)
    first = source.next_prompts(4)
    source.release(first[0])
    rest = source.next_prompts(6)
    assert first[0] not in rest and source.epoch == 1  # not again in its pass
    assert source.next_prompts(1) == [first[0]] and source.epoch == 2  # its next turn is the next pass


def test_next_prompt_gives_the_evidence_s_q_for_adaptive_waves():
    source = SkipOrder(ids(20), 8, seed=0)
    walk(source, 20, 1, lambda p: SOLVED if p < "p1" else VARIED)
    pid, q = source.next_prompt()
    assert q == pytest.approx(1.0 - source.predicted_zero_spread(pid))


def test_bad_constants_are_refused():
    with pytest.raises(ValueError, match="retry_floor"):
        SkipOrder(ids(3), 8, retry_floor=1.5)


# one script step: (k to ask for, the fate of each prompt in flight: same / varied / release / keep in flight)
ACTIONS = st.lists(
    st.tuples(st.integers(0, 7), st.lists(st.sampled_from(["same", "varied", "release", "keep"]), max_size=8)),
    min_size=1,
    max_size=40,
)


def drive(source, actions, trace: list) -> None:
    """The shared script (``selector_script.drive``: k returned when k are free, else refused; none in flight), and
    at every call no prompt handed out more often than the passes begun."""
    total: Counter[str] = Counter()

    def within_passes(got: list[str]) -> None:
        for pid in got:
            total[pid] += 1
            assert total[pid] <= source.epoch, "at most one hand-out per pass begun"

    drive_script(source, actions, trace, check=within_passes)


@settings(max_examples=80, deadline=None)
@given(size=st.integers(1, 15), seed=st.integers(0, 5), actions=ACTIONS,
       floor=st.sampled_from([0.0, RETRY_FLOOR]), share=st.sampled_from([MAX_SKIP_SHARE, 1.0]))
def test_any_events_keep_the_bound_and_return_k_free_prompts(size, seed, actions, floor, share):
    source = SkipOrder(ids(size), 8, seed=seed, retry_floor=floor, max_skip_share=share)
    drive(source, actions, [])


@settings(max_examples=60, deadline=None)
@given(size=st.integers(2, 12), seed=st.integers(0, 5), actions=ACTIONS)
def test_never_twice_in_one_pass(size, seed, actions):
    """Hand-outs stamped with the pass they were made in: every (pass, prompt) at most once."""
    source = SkipOrder(ids(size), 8, seed=seed, max_skip_share=1.0)
    seen: set[tuple[int, str]] = set()
    original = source._hand_out

    def stamped(i: int) -> int:
        key = (source.epoch, source._ids[i])
        assert key not in seen, f"{key[1]} twice in pass {key[0]}"
        seen.add(key)
        return original(i)

    source._hand_out = stamped  # type: ignore[method-assign]
    drive(source, actions, [])


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 12), seed=st.integers(0, 5), before=ACTIONS, after=ACTIONS)
def test_deterministic_and_the_state_round_trips_exactly(size, seed, before, after):
    a = SkipOrder(ids(size), 8, seed=seed)
    b = SkipOrder(ids(size), 8, seed=seed)
    trace_a, trace_b = [], []
    drive(a, before, trace_a)
    drive(b, before, trace_b)
    assert trace_a == trace_b
    state = json.loads(json.dumps(a.state_dict()))
    restored = selector_from_state(state)
    assert type(restored) is SkipOrder and restored.state_dict() == a.state_dict()
    trace_a, trace_r = [], []
    drive(a, after, trace_a)
    drive(restored, after, trace_r)
    assert trace_a == trace_r
    assert restored.state_dict() == a.state_dict()


def test_it_skips_zero_spread_groups_over_a_run_and_keeps_the_most_trainings_near_the_seed_order():
    """A world where half the prompts are solved from the start: over 10 passes' worth of hand-outs the rule
    starts fewer solved prompts than the seed order, and no prompt more than 1.5x the seed order's most."""
    size = 200
    solved = set(ids(size)[::2])
    rng = random.Random(0)

    def outcome(pid: str) -> list[float]:
        return SOLVED if pid in solved else ([1.0] * 7 + [0.0] if rng.random() < 0.5 else VARIED)

    counts = {}
    for selection in ("seed", "skip"):
        source = new_selector(selection, ids(size), 8, 5)
        trace = walk(source, 20, 100, outcome)
        picked = Counter(p for batch in trace for p in batch)
        counts[selection] = (sum(picked[p] for p in solved), max(picked.values()))
    assert counts["skip"][0] < 0.75 * counts["seed"][0]
    assert counts["skip"][1] <= 1.5 * counts["seed"][1]


def test_a_prompt_handed_out_where_it_could_have_been_skipped_weighs_one_over_its_chance():
    """The importance weight: a prompt on a run of one solved group is skipped with probability 1 − RETRY_BASE, so
    when it is handed out it weighs 1 / RETRY_BASE (4); a prompt that could not have been skipped weighs 1, as every
    seed-order hand-out."""
    source = SkipOrder(ids(300), 8, seed=0)
    solved = set(ids(300)[:100])
    walk(source, 300, 1, lambda p: SOLVED if p in solved else VARIED)  # first pass: nothing skipped, all weigh 1
    second = source.next_prompts(150)
    weights = {p: source.weight(p) for p in second}
    chances = {p: source.skip_probability(source.evidence.index(p)) for p in second}
    assert {weights[p] for p in second if p not in solved} == {1.0}
    on_a_run = [p for p in second if p in solved]
    assert on_a_run and all(chances[p] == pytest.approx(1.0 - RETRY_BASE) for p in on_a_run)
    assert all(weights[p] == pytest.approx(1.0 / RETRY_BASE) for p in on_a_run)
    for p in second:
        source.record(p, SOLVED)
    with pytest.raises(ValueError, match="not in flight"):
        source.weight(second[0])  # a weight belongs to a hand-out in flight


def test_with_no_skips_left_in_the_pass_a_prompt_weighs_one():
    """A pass whose skip budget is spent hands its prompts out for sure: no weight, whatever their runs."""
    source = SkipOrder(ids(60), 8, seed=3, max_skip_share=0.0)
    walk(source, 60, 1, lambda _: SOLVED)
    batch = source.next_prompts(60)
    assert all(source.skip_probability(source.evidence.index(p)) > 0 for p in batch)
    assert {source.weight(p) for p in batch} == {1.0}


@pytest.mark.parametrize("selection", ["seed", "spread"])
def test_the_other_rules_never_weigh_a_prompt(selection):
    source = new_selector(selection, ids(40), 8, seed=0)
    for _ in range(3):
        batch = source.next_prompts(20)
        assert {source.weight(p) for p in batch} == {1.0}
        for i, p in enumerate(batch):
            source.record(p, SOLVED if i % 2 else VARIED)
