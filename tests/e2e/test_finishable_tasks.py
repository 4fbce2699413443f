"""The rule that picks the constrained e2e step's seed (``finishable_tasks.py``), on a hand-made task list.

Runs in ``make test`` (no model, no server): the e2e step itself checks the rule on the real catalog.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from e2e.finishable_tasks import finishable, first_wave, seed_of_finishable_wave

from shopsimrl.sampling.order import SeedOrder


class _Tasks:
    """The two env calls the rule makes, over a fixed train split: a task's goal options by task id."""

    def __init__(self, options: dict[str, dict[str, str]]) -> None:
        self.options = options

    def list_tasks(self, split: str) -> list[str]:
        assert split == "train"
        return list(self.options)

    def get_task(self, task_id: str) -> Any:
        return SimpleNamespace(goal={"kind": "mug", "options": self.options[task_id]})


# 30 train tasks, every third one with a goal of no option values (ShopSim's tasks carry an empty dict then)
TASKS = _Tasks({f"train-{i:05d}": ({} if i % 3 == 0 else {"size": "12oz"}) for i in range(30)})


def test_a_task_is_finishable_when_its_goal_asks_for_no_option_value() -> None:
    assert finishable(TASKS, "train-00000") and finishable(TASKS, "train-00003")
    assert not finishable(TASKS, "train-00001")


def test_the_seed_is_the_smallest_whose_first_wave_is_finishable_tasks_only() -> None:
    ids = TASKS.list_tasks("train")
    seed = seed_of_finishable_wave(TASKS, 3)
    wave = first_wave(ids, seed, 3)
    assert wave == [str(t) for t in SeedOrder(ids, seed=seed).next_prompts(3)]  # what the rollout starts first
    assert len(wave) == 3 and all(finishable(TASKS, t) for t in wave)
    assert all(not all(finishable(TASKS, t) for t in first_wave(ids, s, 3)) for s in range(seed))
    assert seed_of_finishable_wave(TASKS, 1) <= seed  # a smaller wave is found at least as early


def test_too_few_finishable_tasks_for_the_wave_is_an_error() -> None:
    with pytest.raises(ValueError, match="only 10 of 30 train tasks are finishable, fewer than 11"):
        seed_of_finishable_wave(TASKS, 11)
