"""The concentration figures (``sampling/concentration.py``): distinct prompts trained in the epoch pass, the most
trainings of one prompt, the top-10 share, the seed order's bound, the summary line, and a state that continues."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling.concentration import (
    CONCENTRATED_FACTOR,
    DISTINCT_PROMPTS_EPOCH,
    MAX_TRAININGS_PER_PROMPT,
    SEED_ORDER_BOUND,
    TOP10_SHARE,
    Concentration,
    concentration_line,
)
from shopsimrl.sampling.source import new_selector, selector_from_state

VARIED = [1.0, 0.0] * 4


def test_the_three_figures_by_example():
    c = Concentration()
    for _ in range(24):
        c.handed()
    c.trained([0, 1, 2, 0], epoch=1)
    c.trained([0, 3], epoch=1)
    figures = c.metrics(prompts=12)
    assert figures[DISTINCT_PROMPTS_EPOCH] == 4
    assert figures[MAX_TRAININGS_PER_PROMPT] == 3
    assert figures[TOP10_SHARE] == 1.0  # fewer than 10 prompts trained: all of it
    assert figures[SEED_ORDER_BOUND] == 2  # 24 hand-outs of 12 prompts: two passes
    c.trained([5], epoch=2)  # a new pass: its distinct prompts start again, the run's counts go on
    assert c.metrics(12)[DISTINCT_PROMPTS_EPOCH] == 1 and c.metrics(12)[MAX_TRAININGS_PER_PROMPT] == 3


def test_the_top10_share_is_that_of_the_ten_most_trained():
    c = Concentration()
    c.trained([0] * 11 + list(range(1, 21)), epoch=1)  # prompt 0: 11 groups; 20 others: 1 each; 31 in all
    assert c.metrics(40)[TOP10_SHARE] == pytest.approx((11 + 9) / 31)


def test_a_run_concentrates_past_one_and_a_half_times_the_seed_order_bound():
    line = concentration_line({MAX_TRAININGS_PER_PROMPT: 24.0, SEED_ORDER_BOUND: 6.0, TOP10_SHARE: 0.385}, 30)
    assert line == ("concentrated: one prompt trained 24 times in 30 steps (seed order bound: 6; "
                    "the 10 most-trained prompts took 38% of trained groups)")
    assert concentration_line({MAX_TRAININGS_PER_PROMPT: CONCENTRATED_FACTOR * 6, SEED_ORDER_BOUND: 6.0}, 30) is None
    assert concentration_line({}, 30) is None  # a run without the figures says nothing


@pytest.mark.parametrize("selection", ["seed", "skip", "spread"])
def test_every_source_counts_its_trained_prompts_and_a_restored_one_goes_on(selection):
    source = new_selector(selection, [f"p{i}" for i in range(20)], 8, 1)
    for _ in range(5):
        batch = source.next_prompts(6)
        for pid in batch:
            source.record(pid, VARIED)
        figures = source.trained(batch[:4])  # four kept of six
    assert figures[SEED_ORDER_BOUND] == 2  # 30 hand-outs of 20 prompts
    restored = selector_from_state(json.loads(json.dumps(source.state_dict())))
    batch = source.next_prompts(3)
    assert restored.next_prompts(3) == batch
    assert restored.trained(batch) == source.trained(batch)


def test_distinct_prompts_follow_the_seed_order_s_passes():
    """The seed order's epoch pass: 20 prompts, 4 trained per step of 5; a new pass every 4 steps."""
    source = new_selector("seed", [f"p{i}" for i in range(20)], 8, 0)
    distinct = []
    for _ in range(8):
        batch = source.next_prompts(5)
        for pid in batch:
            source.record(pid, VARIED)
        distinct.append(source.trained(batch[:4])[DISTINCT_PROMPTS_EPOCH])
    assert distinct == [4, 8, 12, 16, 4, 8, 12, 16]


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.lists(st.integers(0, 14), max_size=8), st.integers(1, 4)), max_size=30))
def test_the_state_round_trips_and_the_figures_are_consistent(steps):
    c = Concentration()
    epoch = 1
    for prompts, advance in steps:
        epoch += advance > 3
        c.handed()
        c.trained(prompts, epoch)
        restored = Concentration.from_state_dict(json.loads(json.dumps(c.state_dict())))
        assert restored.state_dict() == c.state_dict() and restored.metrics(15) == c.metrics(15)
    figures = c.metrics(15)
    assert 0.0 <= figures[TOP10_SHARE] <= 1.0
    assert figures[MAX_TRAININGS_PER_PROMPT] == max([sum(p.count(i) for p, _ in steps) for i in range(15)], default=0)
