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
