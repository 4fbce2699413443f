"""Where the selection skipped a prompt: read from each step's ``state.json`` (the selector's checkpoint).

Only the ``skip`` rule skips prompts one by one and keeps which (shopsimrl/sampling/skip.py):
its state lists the prompts skipped in the current epoch pass (``rule.skipped``, by index into the
evidence's ``prompt_ids``) and each prompt's run of solved groups (``evidence.solved_streak``, what its
chance of a skip grows with).  A prompt that enters a pass's skipped list during step ``k`` was skipped at its
turn in step ``k``.  The other rules skip none (``seed``) or record only how many (``spread``: the run page's
selection chart); for them this finds nothing and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.io import BadFileError
from shopsimrl.rollout.journal import STATE
from shopsimrl.webview.folder import Folder

SKIPPING_RULE = "skip"
FORMER_NAME = "informative"  # the skip rule's name in run folders written before 2026-12-07


@dataclass
class PromptTurn:
    step: int
    epoch: int | None
    skipped: bool  # skipped by the selection at its turn during this step
    solved_streak: int | None  # its run of solved groups after the step


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _rule(name: object) -> object:
    """A rule's name as today's code spells it."""
    return SKIPPING_RULE if name == FORMER_NAME else name


def skips(folder: Folder, run: Path, task_id: str) -> tuple[str | None, list[PromptTurn], list[str]]:
    """The run's selection rule (None: no state.json read), the prompt's state after each step, and notes."""
    selection: str | None = None
    turns: list[PromptTurn] = []
    notes: list[str] = []
    before: tuple[int | None, bool] = (None, False)  # (epoch, in the pass's skipped list) after the previous step
    index: int | None = None
    options = folder.json(run / "run.json", "run.json") if folder.exists(run / "run.json") else None
    if isinstance(options, dict) and _rule(options.get("selection")) not in (None, SKIPPING_RULE):
        return str(options.get("selection")), turns, notes  # a rule that keeps no per-prompt skips
    for step in folder.steps(run):
        path = folder.step(run, step) / STATE
        if not folder.exists(path):
            continue
        try:
            source = _dict(_dict(folder.json(path, "state", keep=False)).get("prompt_source"))
        except BadFileError as exc:
            notes.append(f"step {step}: {exc}")
            continue
        selection = _rule(source.get("strategy")) if isinstance(source.get("strategy"), str) else selection
        if _rule(source.get("strategy")) != SKIPPING_RULE:
            continue
        evidence, rule = _dict(source.get("evidence")), _dict(source.get("rule"))
        ids = evidence.get("prompt_ids")
        if index is None and isinstance(ids, list) and task_id in ids:
            index = ids.index(task_id)
        if index is None:
            continue
        epoch = rule.get("epoch") if type(rule.get("epoch")) is int else None
        skipped_now = isinstance(rule.get("skipped"), list) and index in rule["skipped"]
        streaks = evidence.get("solved_streak")
        streak = streaks[index] if isinstance(streaks, list) and index < len(streaks) and type(streaks[index]) is int \
            else None
        newly = skipped_now and not (before == (epoch, True))
        turns.append(PromptTurn(step, epoch, newly, streak))
        before = (epoch, skipped_now)
    return selection, turns, notes
