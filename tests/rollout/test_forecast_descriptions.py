"""What the ``forecast`` rule reads of a task: its instruction and its category, what a trainer has before rollout;
never the env's hidden goal (the product, its attributes, options, budget, price)."""

from __future__ import annotations

import asyncio

from shopsimrl.env.types import Task
from shopsimrl.rollout.clusters import task_descriptions
from shopsimrl.sampling.forecast import description_features

GOAL = {"product_id": "P-SECRET-1", "title": "Secret Title Lamp", "category": "Home › Lamps", "kind": "lamp",
        "attributes": ["secretattr"], "options": {"color": "secretcolor"}, "budget": {"kind": "hard", "amount": 777.0},
        "price_limit": 777.0, "sku_price": 701.5}


class TaskEnv:
    """An env client that knows two tasks with the same instruction and category but different hidden goals."""

    def __init__(self) -> None:
        other = {**GOAL, "product_id": "P-OTHER-2", "attributes": ["otherattr"], "sku_price": 12.0}
        self.tasks = {"a": Task("a", "train", "Find me a lamp.", GOAL), "b": Task("b", "train", "Find me a lamp.", other)}

    async def get_task(self, task_id: str) -> Task:
        return self.tasks[task_id]


def test_descriptions_are_the_instruction_and_the_category_and_nothing_of_the_hidden_goal():
    descriptions = asyncio.run(task_descriptions(TaskEnv(), ["a", "b"]))
    assert descriptions["a"] == {"instruction": "Find me a lamp.", "category": "Home › Lamps"}
    assert descriptions["a"] == descriptions["b"]  # hidden goals differ; what the forecast reads does not
    names, _labels = description_features(descriptions["a"])
    hidden = ("secret", "p-", "701", "777", "otherattr")
    assert not [n for n in names if any(h in n.lower() for h in hidden)]
