"""ShopSim tasks' categories as the prompt selector's cluster labels (the main job)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

#: Task look-ups in flight at once while reading the categories (a server's task endpoint is cheap).
LOOKUP_CONCURRENCY = 16


async def task_categories(env: Any, task_ids: Sequence[str]) -> dict[str, str]:
    """Each task's category (``get_task(...).goal["category"]``); a task without one is left out (no label)."""
    gate = asyncio.Semaphore(LOOKUP_CONCURRENCY)

    async def one(task_id: str) -> tuple[str, Any]:
        async with gate:
            task = await env.get_task(task_id)
        return task_id, task.goal.get("category")

    pairs = await asyncio.gather(*(one(t) for t in task_ids))
    return {task_id: str(category) for task_id, category in pairs if category is not None}


#: The metadata key of a prompt's ShopSim category, the one label the env gives a task beside its instruction.
CATEGORY_KEY = "category"


async def task_descriptions(env: Any, task_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """What a trainer knows of each task before rollout, for the ``forecast`` rule: its instruction and its label
    (``{"instruction": ..., "category": ...}``).  The goal's other fields (the product, its attributes, options and
    price) are the env's hidden answer and are never read here."""
    gate = asyncio.Semaphore(LOOKUP_CONCURRENCY)

    async def one(task_id: str) -> tuple[str, dict[str, str]]:
        async with gate:
            task = await env.get_task(task_id)
        category = task.goal.get(CATEGORY_KEY)
        return task_id, {"instruction": task.instruction,
                         **({CATEGORY_KEY: str(category)} if category is not None else {})}

    return dict(await asyncio.gather(*(one(t) for t in task_ids)))
