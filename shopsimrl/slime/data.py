"""slime's prompt file for ShopSim: one line per task, the prompt being the task id.

slime's dataset reads ``--input-key prompt`` and ``--metadata-key metadata`` from
each JSONL line; the generate hook turns the task id into an episode.  The task
list comes from the env's own listing (in process, or an env server's), so the
file and the env can never disagree on what a task id means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shopsimrl.errors import UsageError
from shopsimrl.io import atomic_write_jsonl


def prompt_records(task_ids: list[str], split: str) -> list[dict[str, Any]]:
    return [{"prompt": task_id, "metadata": {"task_id": task_id, "split": split}} for task_id in task_ids]


async def export_prompts(env: Any, split: str, out: str | Path) -> int:
    """Write the prompt file of ``split`` atomically; returns the number of tasks."""
    task_ids = list(await env.list_tasks(split))
    if not task_ids:
        raise UsageError(f"the env lists no tasks for split {split!r}")
    atomic_write_jsonl(out, prompt_records(task_ids, split))
    return len(task_ids)
