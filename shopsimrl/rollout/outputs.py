"""What a rollout step leaves on disk, and the records that go into each file.

Layout (every file written through :mod:`shopsimrl.io`, so each is whole or absent)::

    runs/<name>/run.json              the run's configuration
    runs/<name>/metrics.jsonl         one line per finished step (the metrics.json of each step)
    runs/<name>/failure_queue.jsonl   all-wrong groups for the Failure Analyst (dropped ones included)
    runs/<name>/step-<k>/batch.jsonl  kept episodes with GRPO advantages and optimizer update index
    runs/<name>/step-<k>/events.jsonl every controller decision, wave submission and the abort
    runs/<name>/step-<k>/metrics.json SPEC §7 keys plus waste figures
    runs/<name>/step-<k>/traces/      one agent trace JSON per episode
    runs/<name>/step-<k>/triage/      one JSON per completed group, written before the filter
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.io import append_jsonl, atomic_write_json, atomic_write_jsonl
from shopsimrl.rollout.group import GroupRun, triage_record
from shopsimrl.sampling import grpo_advantages, split_into_updates


class RunDirError(ValueError):
    """The run folder exists and is not a rollout run: refuse to overwrite it."""


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "run.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def failure_queue(self) -> Path:
        return self.root / "failure_queue.jsonl"

    def step(self, k: int) -> StepPaths:
        return StepPaths(self.root / f"step-{k}")


@dataclass(frozen=True)
class StepPaths:
    root: Path

    @property
    def batch(self) -> Path:
        return self.root / "batch.jsonl"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    @property
    def triage(self) -> Path:
        return self.root / "triage"

    def trace(self, group_index: int, sibling: int) -> Path:
        return self.traces / f"g{group_index:04d}-s{sibling}.json"

    def triage_file(self, group_index: int) -> Path:
        return self.triage / f"g{group_index:04d}.json"


_RUN_ENTRIES = {"run.json", "metrics.jsonl", "failure_queue.jsonl", "wandb"}


def check_run_dir(out: str | Path, name: str) -> Path:
    """``out/name``, refused (:class:`RunDirError`) if it exists and holds anything but a previous rollout run."""
    root = Path(out) / name
    if root.exists():
        if not root.is_dir():
            raise RunDirError(f"{root} exists and is not a folder: choose another --name or --out")
        strangers = [p.name for p in root.iterdir() if p.name not in _RUN_ENTRIES and not p.name.startswith("step-")]
        if strangers:
            raise RunDirError(f"{root} exists and does not look like a rollout run (it holds {strangers[0]!r}): "
                              f"choose another --name or --out")
    return root


def prepare_run_dir(out: str | Path, name: str) -> RunPaths:
    """Create ``out/name``; a previous rollout run of the same name is replaced, anything else is refused."""
    root = check_run_dir(out, name)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    return RunPaths(root)


def write_triage(paths: StepPaths, group: GroupRun, *, step: int, finished_at: float) -> Path:
    group.triage_path = atomic_write_json(paths.triage_file(group.index), triage_record(group, step=step,
                                                                                      finished_at=finished_at))
    return group.triage_path


def failure_queue_record(group: GroupRun, *, run: str, step: int) -> dict[str, Any]:
    """What the Failure Analyst needs to pick an all-wrong group up: where its triage and traces are."""
    return {
        "run": run,
        "step": step,
        "group_index": group.index,
        "task_id": group.task_id,
        "classification": group.classification,
        "rewards": [ep.reward for ep in group.episodes],
        "end_reasons": [ep.end_reason for ep in group.episodes],
        "triage_path": str(group.triage_path) if group.triage_path else None,
        "trace_paths": [str(ep.trace_path) if ep.trace_path else None for ep in group.episodes],
    }


def append_failure_queue(paths: RunPaths, group: GroupRun, *, step: int) -> None:
    append_jsonl(paths.failure_queue, failure_queue_record(group, run=paths.root.name, step=step))


def batch_records(
    kept: Sequence[GroupRun], decisions: Mapping[int, str], *, step: int, n_samples_per_prompt: int,
    global_batch_size: int,
) -> list[dict[str, Any]]:
    """One row per kept episode: groups in submission order (as slime sorts them), with advantage and update."""
    ordered = sorted(kept, key=lambda g: g.index)
    rows: list[dict[str, Any]] = []
    for update, groups in enumerate(split_into_updates(ordered, n_samples_per_prompt, global_batch_size)):
        for group in groups:
            rewards = [float(ep.reward) for ep in group.episodes]  # type: ignore[arg-type]  # kept => scored
            advantages = grpo_advantages([ep.rollout_id for ep in group.episodes], rewards, label=f"group {group.index}")
            for sibling, (ep, adv) in enumerate(zip(group.episodes, advantages)):
                rows.append({
                    "step": step,
                    "update": update,
                    "group_index": group.index,
                    "wave": group.wave,
                    "decision": decisions[group.index],
                    "task_id": group.task_id,
                    "sibling": sibling,
                    "rollout_id": ep.rollout_id,
                    "seed": ep.seed,
                    "reward": ep.reward,
                    "advantage": adv,
                    "strict_reward": ep.strict_reward,
                    "success": ep.success,
                    "end_reason": ep.end_reason,
                    "turns": ep.turns,
                    "env_steps": ep.env_steps,
                    "trace_path": str(ep.trace_path) if ep.trace_path else None,
                })
    return rows


def write_batch(paths: StepPaths, rows: Iterable[dict[str, Any]]) -> Path:
    return atomic_write_jsonl(paths.batch, rows)


def write_events(paths: StepPaths, events: Iterable[dict[str, Any]]) -> Path:
    return atomic_write_jsonl(paths.events, events)


def write_step_metrics(run: RunPaths, paths: StepPaths, step: int, metrics: Mapping[str, float]) -> None:
    """``metrics.json`` of the step, and the same record appended to the run's ``metrics.jsonl``."""
    atomic_write_json(paths.metrics, dict(metrics))
    append_jsonl(run.metrics, {"step": step, **metrics})
