"""slime's prompt file for ShopSim: one line per task, the prompt being the task id.

slime's dataset reads ``--input-key prompt`` and ``--metadata-key metadata`` from
each JSONL line; the generate hook turns the task id into an episode.  The task
list comes from the env's own listing (in process, or an env server's), so the
file and the env can never disagree on what a task id means.  Each task's ShopSim
category goes into its metadata as ``category`` (when the task has one): the
cluster label the selector data source reads with ``shopsim_cluster_key: category``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shopsimrl.errors import UsageError
from shopsimrl.io import atomic_write_jsonl

#: The metadata key of a prompt's ShopSim category (set ``shopsim_cluster_key`` to it for labelled selection).
CATEGORY_KEY = "category"


def prompt_records(task_ids: list[str], split: str, categories: dict[str, str] | None = None) -> list[dict[str, Any]]:
    categories = categories or {}
    return [{"prompt": task_id, "metadata": {"task_id": task_id, "split": split,
                                             **({CATEGORY_KEY: categories[task_id]} if task_id in categories else {})}}
            for task_id in task_ids]


async def export_prompts(env: Any, split: str, out: str | Path) -> int:
    """Write the prompt file of ``split`` atomically, each task's category in its metadata; returns the number of
    tasks."""
    from shopsimrl.rollout.clusters import task_categories  # the main job's reading of the categories

    task_ids = list(await env.list_tasks(split))
    if not task_ids:
        raise UsageError(f"the env lists no tasks for split {split!r}")
    atomic_write_jsonl(out, prompt_records(task_ids, split, await task_categories(env, task_ids)))
    return len(task_ids)
