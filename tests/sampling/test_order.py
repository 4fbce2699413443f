"""The seed order (``SeedOrder``): seeded epochs, position kept across steps, no prompt twice in flight,
released prompts consumed; and the one factory that turns a selection into a selector."""

from __future__ import annotations

import json
import random

import pytest

from shopsimrl.sampling.evidence import NotEnoughPromptsError
from shopsimrl.sampling.modes import Selection
from shopsimrl.sampling.order import SeedOrder
from shopsimrl.sampling.skip import SkipOrder
from shopsimrl.sampling.source import new_selector, selector_from_state
from shopsimrl.sampling.spread import SpreadSelector

TASKS = [f"t{i}" for i in range(10)]


def finish(order: SeedOrder, prompts: list) -> None:
    for pid in prompts:
        order.settle(pid, [1.0] * 8)


def test_one_epoch_is_the_seeds_shuffle():
    """The documented order: ``random.Random(f"shopsimrl-tasks/{seed}/{epoch}")`` shuffles the prompt set."""
    expected = list(TASKS)
    random.Random("shopsimrl-tasks/1/0").shuffle(expected)
    a, b, c = SeedOrder(TASKS, 8, seed=1), SeedOrder(TASKS, 8, seed=1), SeedOrder(TASKS, 8, seed=2)
    assert a.next_prompts(10) == expected == b.next_prompts(10)
    assert c.next_prompts(10) != expected


def test_position_survives_across_steps():
    order = SeedOrder(TASKS, 8, seed=0)
    step1 = order.next_prompts(4)
    finish(order, step1)
    step2 = order.next_prompts(4)
    assert not set(step1) & set(step2)  # the second step continues the epoch
    finish(order, step2)
    step3 = order.next_prompts(2)
    assert sorted(step1 + step2 + step3) == sorted(TASKS)  # one whole epoch
    assert order.position() == {"epoch": 1, "position": 10, "deferred": 0}


def test_no_prompt_twice_in_flight_across_an_epoch_boundary_the_met_ones_come_first_next_time():
    order = SeedOrder(TASKS, 8, seed=3)
    finish(order, order.next_prompts(7))
    taken = order.next_prompts(3) + order.next_prompts(6)  # crosses into epoch 2 while 9 are in flight
    assert len(taken) == len(set(taken)) == 9
    assert order.epoch == 2
    deferred = order.position()["deferred"]
    assert deferred > 0
    finish(order, taken)
    nxt = order.next_prompts(10)
    assert len(set(nxt)) == 10 and set(nxt[:deferred]) <= set(taken)  # the deferred ones first


def test_a_released_prompt_is_consumed_and_a_step_cannot_start_more_prompts_than_exist():
    order = SeedOrder(TASKS, 8, seed=0)
    first = order.next_prompts(8)
    order.release(first[0])
    assert first[0] not in order.next_prompts(2)  # consumed, as slime does without --partial-rollout
    with pytest.raises(NotEnoughPromptsError, match="only 1 of 10"):
        order.next_prompts(2)


def test_first_starts_count_as_explored_once():
    order = SeedOrder(TASKS, 8, seed=0)
    finish(order, order.next_prompts(10))
    finish(order, order.next_prompts(10))
    assert order.pop_stats()["explored"] == 10 and order.coverage() == 1.0


def test_the_factory_builds_each_strategy_and_restores_it_from_its_state():
    seed, inf = new_selector("seed", TASKS, 8, 4), new_selector(Selection.SKIP, TASKS, 8, 4)
    assert type(seed) is SeedOrder and type(inf) is SkipOrder
    assert type(new_selector("spread", TASKS, 8, 4)) is SpreadSelector
    finish(seed, seed.next_prompts(3))
    seed.next_prompts(2)
    restored = selector_from_state(json.loads(json.dumps(seed.state_dict())))
    assert type(restored) is SeedOrder and restored.state_dict() == seed.state_dict()
    assert restored.next_prompts(4) == seed.next_prompts(4)
    with pytest.raises(ValueError, match="selection must be one of seed, skip, spread"):
        new_selector("greedy", TASKS, 8)
    with pytest.raises(ValueError, match="new_selector"):
        SpreadSelector(TASKS, 8, "seed")
