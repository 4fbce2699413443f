"""What a rollout step leaves on disk, and the records that go into each file.

Layout (every file written through :mod:`shopsimrl.io`, so each is whole or absent)::

    runs/<name>/.lock                 held (an OS file lock) by the run writing this folder
    runs/<name>/run.json              the run's configuration
    runs/<name>/metrics.jsonl         one line per finished step (the metrics.json of each step)
    runs/<name>/failure_queue.jsonl   groups without a success, for the Failure Analyst (dropped ones included)
    runs/<name>/step-<k>/batch.jsonl  kept episodes with GRPO advantages and optimizer update index
    runs/<name>/step-<k>/events.jsonl every controller decision, wave submission and the abort
    runs/<name>/step-<k>/metrics.json docs/dynamic-sampling.md §7 keys plus waste figures
    runs/<name>/step-<k>/state.json   what the next step needs of the run (selector, failure streak)
    runs/<name>/step-<k>/complete.json the completion marker, written last (see ``journal.py``)
    runs/<name>/step-<k>/traces/      one agent trace JSON per episode
    runs/<name>/step-<k>/triage/      one JSON per completed group, written before the filter

A step is complete when its ``complete.json`` exists: it is written after every other record
of the step (``metrics.json`` and the step's line in ``metrics.jsonl`` included), so a crash
between any two writes leaves a step without one, which ``--resume`` removes and runs again.
A step stopped early (interrupt, technical-failure stop, disk full) has an ``events.jsonl``
whose last events say why, and no ``complete.json``.

No run destroys another run's folder: the folder is locked for the whole run
(a second run of the same name is refused), and a finished run's folder is
replaced only when the caller says so (``overwrite``).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.errors import RunRefused
from shopsimrl.io import (
    LockFileError,
    append_jsonl,
    atomic_write_json,
    atomic_write_jsonl,
    check_room,
    open_lock_file,
)
from shopsimrl.rollout.group import GroupRun, triage_record
from shopsimrl.rollout.journal import MARKER, STATE, RunJournal, check_finite_metrics
from shopsimrl.sampling import grpo_advantages, split_into_updates


class RunDirError(RunRefused, ValueError):
    """The run folder cannot be used (foreign, finished, in use, bad name): the message says what to change."""


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
LOCK_NAME = ".lock"


def check_run_name(name: str) -> str:
    """A run name is one plain folder name: letters, digits, ``.``, ``_``, ``-``; no separators, no ``..``."""
    if not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise RunDirError(f"--name {name!r} is not a plain name: use letters, digits, '.', '_' and '-' "
                          f"(no '/', no '..', at most 128 characters)")
    return name


@dataclass(frozen=True)
class RunPaths:
    root: Path
    _lock: list[int] = field(default_factory=list, compare=False, repr=False)  # the held lock's descriptor

    def unlock(self) -> None:
        """Give the folder's lock back (the run is over); idempotent."""
        while self._lock:
            os.close(self._lock.pop())

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
    def state(self) -> Path:
        return self.root / STATE

    @property
    def marker(self) -> Path:
        return self.root / MARKER

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


_RUN_ENTRIES = {"run.json", "metrics.jsonl", "failure_queue.jsonl", "wandb", LOCK_NAME}


def check_out_dir(out: str | Path) -> Path:
    """``--out`` must be a folder we can write in (or creatable under one)."""
    path = Path(out)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise RunDirError(f"--out {out}: {probe} is a file, not a folder: choose another --out")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunDirError(f"--out {out}: cannot write in {probe} (permission denied): choose another --out")
    return path


def check_run_dir(out: str | Path, name: str, *, overwrite: bool = False) -> Path:
    """``out/name``, refused (:class:`RunDirError`) if it is foreign, or a previous run and not ``overwrite``."""
    root = Path(out) / check_run_name(name)
    check_out_dir(out)
    if root.exists():
        if not root.is_dir():
            raise RunDirError(f"{root} exists and is not a folder: choose another --name or --out")
        entries = [p.name for p in root.iterdir()]
        strangers = [e for e in entries if e not in _RUN_ENTRIES and not e.startswith("step-")]
        if strangers:
            raise RunDirError(f"{root} exists and does not look like a rollout run (it holds {strangers[0]!r}): "
                              f"choose another --name or --out")
        if not overwrite and any(e != LOCK_NAME for e in entries):
            raise RunDirError(f"{root} holds a previous run named {name!r}: choose another --name, or pass "
                              f"--overwrite to replace it")
    return root


def prepare_run_dir(out: str | Path, name: str, *, overwrite: bool = False, resume: bool = False) -> RunPaths:
    """Create and lock ``out/name`` for this run; the lock is held until :meth:`RunPaths.unlock`.

    Refused (:class:`RunDirError`) while another run holds the lock, for a foreign folder, and for a
    previous run's folder unless ``overwrite`` (then its contents are replaced, under the lock) or
    ``resume`` (then they are kept: the run continues, see :mod:`shopsimrl.learn.resume`).
    """
    overwrite = overwrite or resume
    root = check_run_dir(out, name, overwrite=overwrite)
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    try:
        fd = open_lock_file(root / LOCK_NAME)
    except LockFileError as exc:
        raise RunDirError(str(exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        raise RunDirError(f"{root} is in use by another running rollout (pid {holder or '?'}): choose another "
                          f"--name, or wait for it to finish") from None
    try:
        check_run_dir(out, name, overwrite=overwrite)  # again, now that no other run can change it
        for entry in root.iterdir():
            if entry.name == LOCK_NAME or resume:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        _check_room(root)  # after an overwrite's removals, which free room
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        if created:
            shutil.rmtree(root, ignore_errors=True)
        raise
    return RunPaths(root, [fd])


def _check_room(root: Path) -> None:
    """Before any step is played (a resumed run too): a full or read-only disk is refused now, not found out at
    the end of a step's work."""
    try:
        check_room(root)
    except OSError as exc:
        raise RunDirError(f"cannot write in the run folder {root}: {exc.strerror or exc}; no step was played. Free "
                          f"space (or fix the folder) and run again") from None


def write_triage(paths: StepPaths, group: GroupRun, *, step: int, finished_at: float) -> Path:
    group.triage_path = atomic_write_json(paths.triage_file(group.index), triage_record(group, step=step,
                                                                                      finished_at=finished_at))
    return group.triage_path


def failure_queue_record(group: GroupRun, *, run: str, step: int) -> dict[str, Any]:
    """What the Failure Analyst needs to pick a group with no success up: where its triage and traces are."""
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
            advantages = [a * group.weight for a in advantages]
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
                    "weight": group.weight,
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


def write_step_end(run: RunPaths, paths: StepPaths, step: int, metrics: Mapping[str, float], *,
                   state: Mapping[str, Any], journal: RunJournal) -> None:
    """The step's last writes, in this order: ``state.json``, ``metrics.json``, the same record appended to the
    run's ``metrics.jsonl``, and the completion marker ``complete.json`` (``batch.jsonl``, the learner's files,
    ``events.jsonl``, traces and triage are in before).  Metrics with NaN are refused before any of them."""
    check_finite_metrics(metrics, paths.metrics)
    atomic_write_json(paths.state, dict(state), indent=None)
    atomic_write_json(paths.metrics, dict(metrics))
    append_jsonl(run.metrics, {"step": step, **metrics})
    journal.complete(paths.root, step)
