"""What the runs page and a run's header show: options, steps done, last held-out success, state and why.

A run is *running* while a process holds its ``.lock`` (read from ``/proc/locks``, never by taking the lock),
*finished* when every step it planned has its completion marker, and *stopped* otherwise: the first step
without a marker says why in its ``events.jsonl`` (``stopped`` with a reason), or it was cut off before
writing one (a crash, a kill).  A run whose files cannot be read shows the one line that says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.io import BadFileError, printable
from shopsimrl.rollout.journal import MARKER
from shopsimrl.webview.folder import Folder, lock_is_held

SUCCESS = "eval/shopsim/success_rate"
TRAIN_SUCCESS = "rollout/shopsim/success_rate"
#: run.json's options shown in the runs table, in this order (the rest are on the run's page)
HEADLINE = ("learner", "selection", "waves", "policy", "env", "products", "seed")


@dataclass
class RunSummary:
    name: str
    state: str  # running | finished | stopped | unreadable
    why: str = ""  # what stopped it, or what could not be read
    options: dict[str, Any] = field(default_factory=dict)
    planned: int | None = None
    done: int = 0
    last_eval: float | None = None
    last_eval_step: int | None = None
    last_success: float | None = None  # training episodes' success at the last step
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> list[tuple[str, str]]:
        return [(key, _shown(self.options[key])) for key in HEADLINE if key in self.options]


def metrics_rows(folder: Folder, run: Path) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Each step's row of ``metrics.jsonl`` (a later row of the same step wins) and notes on what was odd."""
    path = run / "metrics.jsonl"
    if not folder.exists(path):
        return {}, []
    rows: dict[int, dict[str, Any]] = {}
    notes = []
    for line, row in folder.jsonl(path, "metrics.jsonl"):
        step = row.get("step")
        if type(step) is not int or step < 1:
            notes.append(f"metrics.jsonl line {line}: no step number ({printable(repr(step), limit=40)}): left out")
            continue
        if step in rows:
            notes.append(f"metrics.jsonl line {line}: step {step} again: the later row is shown")
        rows[step] = row
    return dict(sorted(rows.items())), notes


def summarize(folder: Folder, name: str, held: set[tuple[int, int, int]]) -> RunSummary:
    """One run's line of the runs page; never raises for a damaged run (its state is ``unreadable``)."""
    try:
        return _summarize(folder, name, held)
    except BadFileError as exc:
        return RunSummary(name, "unreadable", str(exc))


def _summarize(folder: Folder, name: str, held: set[tuple[int, int, int]]) -> RunSummary:
    run = folder.run(name)
    options = folder.json_object(run / "run.json", "run.json") if folder.exists(run / "run.json") else {}
    planned = options.get("steps") if type(options.get("steps")) is int else None
    steps = folder.steps(run)
    done = [k for k in steps if folder.exists(run / f"step-{k}" / MARKER)]
    rows, notes = metrics_rows(folder, run)
    summary = RunSummary(name, "finished", options=options, planned=planned, done=len(done), notes=notes)
    for step, row in rows.items():
        if isinstance(row.get(SUCCESS), (int, float)):
            summary.last_eval, summary.last_eval_step = float(row[SUCCESS]), step
        if isinstance(row.get(TRAIN_SUCCESS), (int, float)):
            summary.last_success = float(row[TRAIN_SUCCESS])
    unmarked = [k for k in steps if k not in done]
    if lock_is_held(run / ".lock", held):
        summary.state = "running"
        summary.why = f"step {unmarked[0]} in progress" if unmarked else "between steps"
    elif unmarked or (planned is not None and len(done) < planned):
        summary.state = "stopped"
        summary.why = stop_reason(folder, run, unmarked[0]) if unmarked else \
            f"after step {max(done, default=0)} of {planned}, between steps"
    return summary


def stop_reason(folder: Folder, run: Path, step: int) -> str:
    """Why step ``step`` has no completion marker, from its ``events.jsonl``'s ``stopped`` event."""
    events = run / f"step-{step}" / "events.jsonl"
    if not folder.exists(events):
        return f"in step {step}, before it wrote events.jsonl (killed, or a crash)"
    try:
        rows = folder.jsonl(events, "events.jsonl")
    except BadFileError as exc:
        return f"in step {step}: {exc}"
    for _, event in reversed(rows):
        if event.get("event") == "stopped":
            reason = printable(event.get("reason"), limit=80)
            message = event.get("message") or event.get("signal")
            return f"in step {step}: {reason}" + (f" ({printable(message, limit=200)})" if message else "")
    return f"in step {step}, after events.jsonl, before its completion marker (killed, or a crash)"


def _shown(value: Any) -> str:
    return printable(value if isinstance(value, str) else repr(value), limit=60)
