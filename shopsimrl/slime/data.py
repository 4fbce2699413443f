"""slime's prompt file for ShopSim: one line per task, the prompt being the task id.

slime's dataset reads ``--input-key prompt`` and ``--metadata-key metadata`` from
each JSONL line; the generate hook turns the task id into an episode.  The task
list comes from the env's own listing (in process, or an env server's), so the
file and the env can never disagree on what a task id means.  Each task's metadata
holds what a trainer knows before rollout, as the main job reads it
(:func:`~shopsimrl.rollout.clusters.task_descriptions`): its instruction (``instruction``) and
its ShopSim category (``category``, when the task has one), the cluster label the selector data
source reads with ``shopsim_cluster_key: category``.  The ``forecast`` rule reads the instruction
and every label (every metadata key but the bookkeeping ``task_id`` and ``split``).

:func:`read_prompts` reads such a file back and refuses a malformed line in one line naming the
file and the line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shopsimrl.errors import Refusal, UsageError
from shopsimrl.io import BadFileError, atomic_write_jsonl, parse_json_text
from shopsimrl.rollout.clusters import CATEGORY_KEY
from shopsimrl.sampling.forecast import TEXT_KEY

__all__ = ["BOOKKEEPING_KEYS", "CATEGORY_KEY", "PromptDataError", "descriptions_of", "export_prompts",
           "prompt_records", "read_prompts", "with_labels"]

#: Metadata keys that are bookkeeping, not labels: the forecast does not read them.
BOOKKEEPING_KEYS = ("task_id", "split")


class PromptDataError(Refusal, ValueError):
    """A prompt file line that is not what ``shopsimrl data export`` writes (the message names the file and line)."""


def prompt_records(task_ids: list[str], split: str,
                   descriptions: Mapping[str, Mapping[str, str]] | None = None) -> list[dict[str, Any]]:
    """One record per task: the task id as the prompt; its metadata the task id, the split and its description."""
    descriptions = descriptions or {}
    return [{"prompt": task_id, "metadata": {"task_id": task_id, "split": split, **descriptions.get(task_id, {})}}
            for task_id in task_ids]


async def export_prompts(env: Any, split: str, out: str | Path,
                         labels: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """Write the prompt file of ``split`` atomically, each task's instruction and category in its metadata, and its
    ``labels`` (e.g. its record on earlier runs) if any; returns the number of tasks."""
    from shopsimrl.rollout.clusters import task_descriptions  # the main job's reading of instruction and labels

    task_ids = list(await env.list_tasks(split))
    if not task_ids:
        raise UsageError(f"the env lists no tasks for split {split!r}")
    described = _over(await task_descriptions(env, task_ids), labels, task_ids)
    atomic_write_jsonl(out, prompt_records(task_ids, split, described))
    return len(task_ids)


def read_prompts(path: str | Path, input_key: str = "prompt",
                 metadata_key: str = "metadata") -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The task ids of a prompt file in order (each once) and each one's metadata; a malformed line (not JSON, its
    metadata not an object, no task id, a text that is not a string, a label that is not a plain value) is refused
    naming the file and the line."""
    task_ids: list[str] = []
    metadata: dict[str, dict[str, Any]] = {}
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PromptDataError(f"{where}: not UTF-8 text (byte {exc.start})") from None
            if not line.strip():
                continue
            try:  # strict: no NaN, no overflowing number, no nesting deeper than the bound
                record = parse_json_text(line, where)
            except BadFileError as exc:
                raise PromptDataError(str(exc)) from None
            meta = record.get(metadata_key) if isinstance(record, dict) else None
            if not isinstance(record, dict) or not isinstance(meta or {}, dict):
                raise PromptDataError(f"{where}: {metadata_key!r} must be a JSON object of labels")
            meta = meta or {}
            task_id = meta.get("task_id", record.get(input_key))
            if not isinstance(task_id, str) or not task_id:
                raise PromptDataError(f"{where}: no task id (neither {metadata_key}.task_id nor {input_key})")
            if not isinstance(meta.get(TEXT_KEY, ""), str):
                raise PromptDataError(f"{where}: {metadata_key}.{TEXT_KEY} must be a string")
            bad = [k for k, v in meta.items() if not isinstance(v, (str, int, float, bool)) and v is not None]
            if bad:
                raise PromptDataError(f"{where}: label {bad[0]!r} must be a string, number or boolean")
            if task_id not in metadata:
                task_ids.append(task_id)
                metadata[task_id] = {**meta, "task_id": task_id}
    if not task_ids:
        raise PromptDataError(f"{path}: the prompt file is empty")
    return task_ids, metadata


def descriptions_of(metadata: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each prompt's text and labels for the ``forecast`` rule: its metadata but the bookkeeping keys."""
    return {task_id: {k: v for k, v in meta.items() if k not in BOOKKEEPING_KEYS} for task_id, meta in metadata.items()}


def with_labels(descriptions: Mapping[str, Mapping[str, Any]] | None, labels: Mapping[str, Mapping[str, Any]],
                task_ids: list[str], source: str | Path) -> dict[str, dict[str, Any]]:
    """The main job's descriptions with a prompt file's (``source``) text and labels over them, so the ``forecast``
    rule reads what slime's data source reads from the same file.  A task the file names that this run does not
    train on is refused: the file belongs to another env, catalog or split."""
    known = set(task_ids)
    unknown = [task_id for task_id in labels if task_id not in known]
    if unknown:
        raise PromptDataError(
            f"{source}: {len(unknown)} of its tasks are not among this run's {len(task_ids)} train tasks (the first: "
            f"{unknown[0]!r}): write the prompt file from the same env, catalog and split (shopsimrl data export)")
    return _over(descriptions, labels, task_ids)


def _over(descriptions: Mapping[str, Mapping[str, Any]] | None, labels: Mapping[str, Mapping[str, Any]] | None,
          task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each task's description with its ``labels`` over it (a key in both: the label's value)."""
    base, extra = descriptions or {}, labels or {}
    return {task_id: {**base.get(task_id, {}), **extra.get(task_id, {})} for task_id in task_ids}
