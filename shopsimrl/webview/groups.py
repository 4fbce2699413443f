"""A step's groups as the step page lists them, and one prompt's groups across a run.

A group's verdict is what the filter made of it, from the step's ``events.jsonl``: ``kept`` (accepted),
``fallback`` (a zero-spread group kept because the batch was short), ``zero-spread`` and ``technical``
(dropped), ``surplus`` (finished after the batch was full) and ``aborted`` (cancelled when the step reached
its target).  Its siblings' rewards come from its ``triage/`` record, its importance weight from
``batch.jsonl`` (kept groups only: the weight scales the advantages that are trained on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.io import BadFileError, printable
from shopsimrl.sampling import Decision, Verdict
from shopsimrl.webview.folder import Folder

VERDICTS = ("kept", "fallback", "zero-spread", "technical", "surplus", "aborted")
#: the technical failures are the env's or the infrastructure's, never the model's (a model's mistake is scored)
FAILED = ("zero-spread", "technical", "surplus", "aborted")


@dataclass
class Group:
    index: int
    task_id: str
    wave: int | None
    verdict: str
    classification: str = ""
    opened_at: float | None = None  # seconds into the step: when its wave opened it
    finished_at: float | None = None  # when it finished (aborted: when it was cancelled)
    rewards: list[float | None] = field(default_factory=list)
    end_reasons: list[str | None] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    weight: float | None = None
    triage: bool = False

    @property
    def mean_reward(self) -> float | None:
        scored = [r for r in self.rewards if r is not None]
        return sum(scored) / len(scored) if scored else None


def verdict_of(event: dict[str, Any]) -> str:
    """The page's word for a ``decision`` event: the filter's decision, and for a drop, why."""
    decision = event.get("decision")
    if decision == Decision.ACCEPTED.value:
        return "kept"
    if decision in (Decision.FALLBACK.value, Decision.SURPLUS.value):
        return str(decision)
    return "technical" if event.get("verdict") == Verdict.TECHNICAL.value else "zero-spread"


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _text(value: Any, limit: int = 200) -> str:
    return printable(value, limit=limit) if value is not None else ""


def step_groups(folder: Folder, run: Path, step: int, *, task_id: str | None = None
                ) -> tuple[list[Group], list[dict[str, Any]], list[str]]:
    """Every group of the step (by index; ``task_id``: that prompt's only), the step's events and notes on
    records that were missing or odd."""
    root = folder.step(run, step)
    notes: list[str] = []
    events = [e for _, e in folder.jsonl(root / "events.jsonl", "events.jsonl")] \
        if folder.exists(root / "events.jsonl") else []
    if not events:
        notes.append("no events.jsonl: the step has not finished (the groups' verdicts are written at its end)")
    groups: dict[int, Group] = {}
    opened: dict[int, tuple[str, int | None, float | None]] = {}
    for event in events:
        kind = event.get("event")
        t = float(event["t"]) if isinstance(event.get("t"), (int, float)) and not isinstance(event["t"], bool) else None
        if kind == "wave" and isinstance(event.get("task_ids"), list):
            first = _int(event.get("first_index")) or 0
            for offset, task in enumerate(event["task_ids"]):
                opened[first + offset] = (_text(task, 120), _int(event.get("wave")), t)
        elif kind == "decision" and _int(event.get("index")) is not None:
            index = int(event["index"])
            groups[index] = Group(index, _text(event.get("task_id"), 120), _int(event.get("wave")), verdict_of(event),
                                  _text(event.get("classification"), 40))
        elif kind == "abort" and isinstance(event.get("aborted"), list):
            for index in event["aborted"]:
                if _int(index) is not None and index not in groups:
                    task, wave, _ = opened.get(index, ("", None, None))
                    groups[index] = Group(index, task, wave, "aborted", finished_at=t)
    for index, group in groups.items():
        group.opened_at = opened.get(index, ("", None, None))[2]
    if task_id is not None:
        groups = {k: g for k, g in groups.items() if g.task_id == task_id}
    _add_triage(folder, root, groups, notes)
    if any(g.verdict in ("kept", "fallback") for g in groups.values()):
        _add_weights(folder, root, groups, notes)
    return [groups[k] for k in sorted(groups)], events, notes


def _add_triage(folder: Folder, root: Path, groups: dict[int, Group], notes: list[str]) -> None:
    for group in groups.values():
        path = root / "triage" / f"g{group.index:04d}.json"
        if not folder.exists(path):
            continue
        try:
            record = folder.json_object(path, "triage")
        except BadFileError as exc:
            notes.append(str(exc))
            continue
        group.triage = True
        if isinstance(record.get("finished_at"), (int, float)) and not isinstance(record["finished_at"], bool):
            group.finished_at = float(record["finished_at"])
        group.classification = group.classification or _text(record.get("classification"), 40)
        for sibling in record.get("siblings") or []:
            if not isinstance(sibling, dict):
                continue
            reward = sibling.get("reward")
            group.rewards.append(float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool)
                                 else None)
            group.end_reasons.append(_text(sibling.get("end_reason"), 40) or None)
            error = sibling.get("error")
            group.errors.append(_text(error.get("message") if isinstance(error, dict) else error, 200) or None)


def _add_weights(folder: Folder, root: Path, groups: dict[int, Group], notes: list[str]) -> None:
    if not folder.exists(root / "batch.jsonl"):
        return
    try:
        rows = folder.jsonl(root / "batch.jsonl", "batch.jsonl")
    except BadFileError as exc:
        notes.append(str(exc))
        return
    for _, row in rows:
        index, weight = _int(row.get("group_index")), row.get("weight")
        if index in groups and isinstance(weight, (int, float)) and not isinstance(weight, bool):
            groups[index].weight = float(weight)  # type: ignore[index]


def group_record(folder: Folder, run: Path, step: int, index: int) -> dict[str, Any] | None:
    """The group's triage record (None: it has none, e.g. aborted before it finished)."""
    path = folder.step(run, step) / "triage" / f"g{index:04d}.json"
    return folder.json_object(path, "triage") if folder.exists(path) else None


@dataclass
class PromptGroup:
    step: int
    group: Group


def prompt_groups(folder: Folder, run: Path, task_id: str) -> tuple[list[PromptGroup], list[str]]:
    """Every group of the prompt ``task_id`` in the run, step by step; notes name the steps that could not
    be read (their groups are left out, the others shown)."""
    found: list[PromptGroup] = []
    notes: list[str] = []
    for step in folder.steps(run):
        try:
            events_path = folder.step(run, step) / "events.jsonl"
            if not folder.exists(events_path):
                continue
            events = [e for _, e in folder.jsonl(events_path, "events.jsonl")]
            mentioned = any(e.get("task_id") == task_id or (isinstance(e.get("task_ids"), list)
                                                            and task_id in e["task_ids"]) for e in events)
            if not mentioned:
                continue
            groups, _, step_notes = step_groups(folder, run, step, task_id=task_id)
        except BadFileError as exc:
            notes.append(f"step {step}: {exc}")
            continue
        notes.extend(f"step {step}: {n}" for n in step_notes)
        found.extend(PromptGroup(step, g) for g in groups)
    return found, notes
