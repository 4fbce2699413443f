"""Every selector's contract (k distinct, never in flight, determinism, state round-trip, every prompt tried)
and the spread rule's own behaviour (``SpreadSelector``, the former informative selector)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling.selector_script import drive

from shopsimrl.sampling.estimate import zero_spread_probability
from shopsimrl.sampling.evidence import NotEnoughPromptsError, PromptStateError
from shopsimrl.sampling.source import new_selector, selector_from_state
from shopsimrl.sampling.spread import EXPLORE_HORIZON_EPOCHS, SpreadSelector

SELECTION = st.sampled_from(["seed", "skip", "spread"])
# one script step: (k to ask for, how to finish each started prompt: record all-same / record varied / release)
ACTIONS = st.lists(
    st.tuples(st.integers(0, 6), st.lists(st.sampled_from(["same", "varied", "release", "keep"]), max_size=6)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(selection=SELECTION, size=st.integers(1, 12), seed=st.integers(0, 3), actions=ACTIONS)
def test_k_distinct_never_in_flight(selection, size, seed, actions):
    drive(new_selector(selection, [f"p{i}" for i in range(size)], 8, seed), actions)


@settings(max_examples=40, deadline=None)
@given(selection=SELECTION, size=st.integers(1, 12), seed=st.integers(0, 3), actions=ACTIONS)
def test_deterministic_under_a_seed(selection, size, seed, actions):
    ids = [f"p{i}" for i in range(size)]
    a, b = [], []
    drive(new_selector(selection, ids, 8, seed), actions, a)
    drive(new_selector(selection, ids, 8, seed), actions, b)
    assert a == b


@settings(max_examples=40, deadline=None)
@given(selection=SELECTION, size=st.integers(1, 12), seed=st.integers(0, 3), before=ACTIONS, after=ACTIONS)
def test_state_round_trip_through_json(selection, size, seed, before, after):
    sel = new_selector(selection, [f"p{i}" for i in range(size)], 8, seed)
    drive(sel, before)
    restored = selector_from_state(json.loads(json.dumps(sel.state_dict())))
    assert restored.state_dict() == sel.state_dict()
    a, b = [], []
    drive(sel, after, a)
    drive(restored, after, b)
    assert a == b


@settings(max_examples=40, deadline=None)
@given(selection=SELECTION, size=st.integers(1, 40), seed=st.integers(0, 5), k=st.integers(1, 8), data=st.data())
def test_every_prompt_is_tried(selection, size, seed, k, data):
    """Whatever the outcomes, every prompt is handed out: within the first epoch pass with seed and informative
    (which never skips a prompt it has not observed); with spread, within the exploration horizon plus one pick per never-seen prompt released back (and one batch)."""
    sel = new_selector(selection, [f"p{i}" for i in range(size)], 8, seed)
    rng = random.Random(data.draw(st.integers(0, 100)))
    picks = 0
    released_unseen = 0
    bound = round(EXPLORE_HORIZON_EPOCHS * size) + k
    while sel.coverage() < 1.0 and picks < bound + released_unseen:
        batch = sel.next_prompts(min(k, len(sel) - len(sel.in_flight)))
        picks += len(batch)
        for pid in batch:
            r = rng.random()
            if r < 0.1:
                released_unseen += sel.predicted_pass_rate(pid) is None  # never observed: back to the unseen
                sel.release(pid)
            else:
                sel.record(pid, [1.0] * 8 if r < 0.8 else [1.0, 0.0] * 4)
    assert sel.coverage() == 1.0
    if selection != "spread":
        assert sel.epoch == 1 or picks <= size + k  # the first epoch (or the call that opened the second)


def test_spread_skips_solved_prompts_and_keeps_rechecking_them():
    ids = [f"p{i}" for i in range(200)]
    sel = SpreadSelector(ids, 8, seed=0)
    solved = set(ids[:150])
    for pid in sel.next_prompts(200):  # first epoch: everything explored
        sel.record(pid, [1.0] * 8 if pid in solved else [1.0, 0.0] * 4)
    stats = sel.pop_stats()
    assert stats["explored"] == 200 and stats["skipped"] == 150  # the solved ones now wait for re-checks
    chosen = []
    for _ in range(60):
        batch = sel.next_prompts(10)
        chosen += batch
        for pid in batch:
            sel.record(pid, [1.0] * 8 if pid in solved else [1.0, 0.0] * 4)
    informative_share = sum(p not in solved for p in chosen) / len(chosen)
    assert informative_share > 0.9  # 25% of the prompts, nearly all the picks (seed order: 25%)
    stats = sel.pop_stats()
    assert 0 < stats["rechecked"] < 0.1 * len(chosen)  # solved prompts still come back, rarely
    assert len({p for p in chosen if p in solved}) == stats["rechecked"]  # each re-check a different one


def test_released_prompts_come_back_first_with_spread_and_are_consumed_with_seed():
    ids = [f"p{i}" for i in range(20)]
    inf, seed = SpreadSelector(ids, 8, seed=1), new_selector("seed", ids, 8, 1)
    first_inf, first_seed = inf.next_prompts(4), seed.next_prompts(4)
    inf.release(first_inf[2])
    seed.release(first_seed[2])
    assert inf.next_prompts(1) == [first_inf[2]]
    assert seed.next_prompts(1) != [first_seed[2]]


def test_release_with_rewards_keeps_the_evidence():
    sel = SpreadSelector(["a", "b"], 8, seed=0)
    sel.next_prompts(1)
    (pid,) = sel.in_flight
    sel.release(pid, [1.0] * 8)
    assert sel.predicted_pass_rate(pid) > 0.9


def test_errors_name_the_problem():
    sel = SpreadSelector(["a", "b"], 8, seed=0)
    with pytest.raises(PromptStateError, match="not in flight"):
        sel.record("a", [1.0])
    with pytest.raises(PromptStateError, match="unknown prompt"):
        sel.release("zzz")
    with pytest.raises(NotEnoughPromptsError, match="only 2 of 2"):
        sel.next_prompts(3)
    with pytest.raises(ValueError, match="selection"):
        SpreadSelector(["a"], 8, "greedy")
    with pytest.raises(ValueError, match="empty"):
        SpreadSelector([], 8)
    (pid,) = sel.next_prompts(1)
    with pytest.raises(ValueError, match="at least one reward"):
        sel.record(pid, [])


def test_zero_spread_formula():
    assert zero_spread_probability(0.5, 8) == pytest.approx(2 / 256)
    assert zero_spread_probability(0.9, 8) == pytest.approx(0.9**8 + 0.1**8)


def test_a_prompt_that_failed_comes_back_once_the_policy_has_caught_up():
    """The shared skill: prompts that keep teaching move it up, and a prompt that failed 8 of 8 long ago is then
    predicted near 50% without being tried again (a per-prompt estimate that only forgets could not tell)."""
    ids = [f"p{i}" for i in range(40)]
    sel = SpreadSelector(ids, 8, seed=0)
    for pid in sel.next_prompts(40):
        sel.record(pid, [0.0] * 8 if pid == "p0" else [1.0, 0.0] * 4)
    before = sel.predicted_zero_spread("p0")
    start = sel.skill
    for _ in range(30):  # the policy improves: the prompts it trains on pass more and more often
        batch = sel.next_prompts(8)
        for pid in batch:
            if pid == "p0":
                sel.release(pid)
            else:
                sel.record(pid, [1.0] * 7 + [0.0])  # 50% -> 87.5%: about 2 logits
    assert sel.skill > start + 1.0
    assert sel.predicted_zero_spread("p0") < before - 0.2
def test_exploration_is_paced_over_the_horizon_and_stops_at_coverage():
    """Every prompt answers with spread (so observed prompts always beat the unseen): exploration follows the
    pro-rata schedule of the horizon, reaches full coverage at its end, and no later pick explores."""
    size = 100
    sel = SpreadSelector([f"p{i}" for i in range(size)], 8, seed=3, explore_horizon_epochs=2.0)
    for picks in range(1, 301):
        (pid,) = sel.next_prompts(1)
        sel.record(pid, [1.0, 0.0] * 4)
        never_seen_left = size - round(sel.coverage() * size)
        assert never_seen_left <= max(0, 200 - picks) * size / 200  # on (or ahead of) the schedule
        if picks == 100:
            assert 0.5 <= sel.coverage() < 0.6  # about half the picks explored, not all
    assert sel.coverage() == 1.0
    assert sel.pop_stats()["explored"] == size  # once covered, picks go to the best bucket


def test_explore_horizon_must_be_positive():
    with pytest.raises(ValueError, match="explore_horizon_epochs"):
        SpreadSelector(["a"], 8, explore_horizon_epochs=0.0)


def test_siblings_that_agree_on_a_partial_reward_count_as_agreeing():
    """The model predicts agreement: a group of identical partial rewards (ShopSim's same_partial) is read as
    agreement, not as a pass rate near the middle that would predict spread."""
    sel = SpreadSelector(["same", "mixed"], 8, seed=0)
    for pid in sel.next_prompts(2):
        sel.record(pid, [0.5] * 8 if pid == "same" else [1.0, 0.0] * 4)
    assert sel.predicted_zero_spread("same") > 0.5 > sel.predicted_zero_spread("mixed")


def test_settle_releases_unscored_and_surplus_groups_and_records_the_rest():
    sel = SpreadSelector(["a", "b", "c"], 8, seed=0)
    a, b, c = sel.next_prompts(3)
    sel.settle(a, None)  # technical: back to the pool, no evidence
    sel.settle(b, [1.0] * 8, surplus=True)  # surplus: back, with its evidence
    sel.settle(c, [1.0, 0.0] * 4)  # kept or dropped: recorded
    stats = sel.pop_stats()
    assert stats["released"] == 2 and sel.in_flight == frozenset()
    assert sel.predicted_pass_rate(a) is None and sel.predicted_pass_rate(b) > 0.8
    assert sel.predicted_pass_rate(c) is not None
    pid, q = SpreadSelector(["x"], 8, seed=0).next_prompt()
    assert pid == "x" and 0.0 < q < 1.0
