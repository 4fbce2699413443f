"""``--resume``: continue a run from its last complete step, as if it had never stopped.

A step is complete when its ``metrics.json`` exists.  What the next step needs is rebuilt
from the run folder: the learned parameters and Adam's state from that step's
``policy.npz``; the seed order's position by replaying every wave from the steps'
``events.jsonl`` (each replayed wave must hand out the tasks it recorded, or the run is
refused); episode seeds depend only on (seed, step, group, sibling).  Folders and
log lines of a step that did not complete belong to the same run and are removed.

Not restored (so refused or documented): the informative selector's and adaptive waves'
state (``--selection informative`` and ``--waves adaptive`` cannot resume yet), the
heuristic learner's per-task counts (``--learner heuristic`` cannot resume), the
technical-failure streak (it restarts at 0) and fault injection's random stream.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shopsimrl.errors import Refusal
from shopsimrl.io import atomic_write_jsonl, read_jsonl
from shopsimrl.rollout.outputs import RunPaths
from shopsimrl.sampling.modes import Strategy
from shopsimrl.sampling.order import SeedOrder
from shopsimrl.sampling.source import prompt_source

#: run.json fields that must match for a run to be continued (``steps`` may grow).
SAME_RUN_FIELDS = ("seed", "knobs", "selection", "waves", "policy", "products", "catalog_seed", "max_turns",
                   "learner", "eval_every", "train_tasks")


class ResumeError(Refusal, ValueError):
    """The run cannot be continued as asked; the message says why."""


def _step_number(path: Path) -> int | None:
    return int(path.name[5:]) if path.name.startswith("step-") and path.name[5:].isdigit() else None


def completed_steps(root: Path) -> int:
    """The last step k such that steps 1..k all completed (0: none)."""
    k = 0
    while (root / f"step-{k + 1}" / "metrics.json").exists():
        k += 1
    return k


def check_same_run(root: Path, current: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded run.json, refused unless the fields that shape the run agree with ``current``."""
    config_path = root / "run.json"
    if not config_path.exists():
        raise ResumeError(f"{root} holds no run to resume (no run.json): drop --resume to start it")
    recorded = json.loads(config_path.read_text(encoding="utf-8"))
    differ = [f for f in SAME_RUN_FIELDS if recorded.get(f) != current.get(f)]
    if differ:
        shown = ", ".join(f"{f}: {recorded.get(f)!r} then, {current.get(f)!r} now" for f in differ)
        raise ResumeError(f"--resume continues a run with its own settings; these differ ({shown})")
    return recorded


def trim_incomplete(paths: RunPaths, last: int) -> None:
    """Remove what steps after ``last`` left (folders, metrics lines, failure-queue lines); the lock is held."""
    for entry in paths.root.iterdir():
        k = _step_number(entry)
        if k is not None and k > last:
            shutil.rmtree(entry)
    for log in (paths.metrics, paths.failure_queue):
        if log.exists():
            atomic_write_jsonl(log, [r for r in read_jsonl(log) if int(r.get("step", 0)) <= last])


def replay_seed_order(root: Path, last: int, task_ids: Sequence[str], n_samples_per_prompt: int,
                      seed: int) -> SeedOrder:
    """The seed order as it stood after step ``last``, rebuilt from the recorded waves.

    Each wave hands out the next prompts of the order; at a step's end every prompt it started is
    out of flight again (decided or aborted alike: the seed order has consumed it either way).
    """
    order = prompt_source(Strategy.SEED, task_ids, n_samples_per_prompt, seed)
    assert isinstance(order, SeedOrder)
    for k in range(1, last + 1):
        started: list[str] = []
        for event in read_jsonl(root / f"step-{k}" / "events.jsonl"):
            if event.get("event") != "wave":
                continue
            recorded = [str(t) for t in event["task_ids"]]
            if [str(t) for t in order.next_prompts(len(recorded))] != recorded:
                raise ResumeError(f"step {k} wave {event['wave']}: the task order does not replay (another train "
                                  f"split or seed?); the run cannot be continued")
            started.extend(recorded)
        for task_id in started:
            order.release(task_id)
    return order
