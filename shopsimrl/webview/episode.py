"""One episode's trace as a conversation: the instruction, then per turn the page the policy saw, its tool call
or reply, and the env's answer; how it ended, the reward and its parts.

Two kinds of going wrong are told apart, as the seed tells them: a *model's mistake* (a reply that breaks the
tool protocol, an action the page does not allow: the env answers with feedback, the episode goes on and is
scored) and a *technical failure* (the env or the infrastructure raised: the episode is unscored, its trace's
``error`` says where).  The trace is read as written (shopsimrl/agent/trace.py, ``shopsimrl.trace/v2``);
a field of another shape is shown as absent, never trusted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.io import BadFileError, printable
from shopsimrl.webview.folder import Folder, OutsideError

TRACE_NAME = re.compile(r"g([0-9]{4,6})-s([0-9]{1,4})\.json")
TEXT_LIMIT = 1 << 15  # characters of one observation or reply shown (the rest is cut, and says so)


@dataclass
class Turn:
    number: int
    page: str
    observation: str
    reply: str  # the model's text, if any
    calls: list[tuple[str, str]]  # (tool, arguments)
    action: str
    mistake: str  # the protocol error or the env's feedback on an invalid action: the model's
    reward: float | None
    ended: str
    seconds: str
    answer: str = ""  # the env's answer: the page after the action (the next turn's, or the last page)

    @property
    def answer_head(self) -> str:
        """The answer's first line past the instruction (what kind of page, or the env's message)."""
        lines = [line for line in self.answer.splitlines() if line.strip() and not line.startswith("Instruction:")]
        return lines[0][:200] if lines else ""


@dataclass
class Episode:
    rollout_id: str
    instruction: str
    goal: list[tuple[str, str]]
    turns: list[Turn]
    final_observation: str
    scored: bool
    end_reason: str
    reward: float | None
    reward_parts: list[tuple[str, str]]
    technical: list[tuple[str, str]]  # the trace's error: stage, type, message (empty: none)
    cancelled: bool
    policy: str
    notes: list[str] = field(default_factory=list)


def _text(value: Any, limit: int = TEXT_LIMIT) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _pairs(record: dict[str, Any], limit: int = 300) -> list[tuple[str, str]]:
    return [(printable(k, limit=60), _text(v, limit)) for k, v in record.items()]


def trace_path(folder: Folder, run: Path, step: int, group: int, sibling: int) -> Path:
    return folder.step(run, step) / "traces" / f"g{group:04d}-s{sibling}.json"


def read_episode(folder: Folder, path: Path) -> Episode:
    if not folder.exists(path):
        raise OutsideError(f"no episode {printable(path.stem)} in this step (its trace was never written)")
    trace = folder.json_object(path, "trace")
    task = _dict(trace.get("task"))
    turns = []
    steps = trace.get("steps") if isinstance(trace.get("steps"), list) else []
    for number, raw in enumerate(steps, start=1):
        step = _dict(raw)
        output = _dict(step.get("output"))
        calls = [(_text(_dict(c).get("name"), 80), _text(_dict(c).get("arguments"), 4000))
                 for c in (output.get("tool_calls") if isinstance(output.get("tool_calls"), list) else [])]
        mistake = ""
        if step.get("protocol_error") is not None:
            error = _dict(step.get("protocol_error"))
            mistake = _text(error.get("message") or error.get("code") or step.get("protocol_error"), 2000)
        elif step.get("feedback"):
            mistake = _text(step.get("feedback"), 2000)
        ended = _text(step.get("end_reason"), 80) if step.get("terminated") or step.get("truncated") else ""
        seconds = "policy {:.3f} s, env {:.3f} s".format(_number(step.get("policy_seconds")) or 0.0,
                                                          _number(step.get("env_seconds")) or 0.0)
        turns.append(Turn(number, _text(step.get("page"), 40),
                          _text(step.get("observation")), _text(output.get("text")), calls,
                          _text(step.get("action"), 4000), mistake, _number(step.get("reward")), ended, seconds))
    final_observation = _text(trace.get("final_observation"))
    for turn, after in zip(turns, [t.observation for t in turns[1:]] + [final_observation]):
        turn.answer = after
    final = _dict(trace.get("final"))
    error = _dict(trace.get("error"))
    return Episode(
        rollout_id=_text(trace.get("rollout_id"), 80),
        instruction=_text(task.get("instruction"), 4000),
        goal=_pairs(_dict(task.get("goal"))),
        turns=turns,
        final_observation=final_observation,
        scored=trace.get("scored") is True,
        end_reason=_text(trace.get("end_reason"), 80),
        reward=_number(final.get("reward")),
        reward_parts=_pairs(_dict(final.get("reward_detail"))),
        technical=_pairs(error) if trace.get("error") is not None else [],
        cancelled=trace.get("cancelled") is True,
        policy=_text(trace.get("policy"), 80),
    )


def siblings(folder: Folder, run: Path, step: int, group: int) -> list[int]:
    """The sibling numbers whose trace files exist for ``group`` (the episode page's neighbours)."""
    traces = folder.step(run, step) / "traces"
    found = []
    for sibling in range(0, 1024):
        if not folder.exists(traces / f"g{group:04d}-s{sibling}.json"):
            break
        found.append(sibling)
    return found


def check_trace_name(group: int, sibling: int) -> None:
    if not (0 <= group < 1_000_000 and 0 <= sibling < 10_000):
        raise BadFileError(f"no episode g{group}-s{sibling}")
