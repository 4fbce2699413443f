"""Test doubles for the agent tests (imported as ``agent.fakes``; ``tests`` is on the pytest path): a tiny in-memory shop and a scripted policy.

The fake shop follows the real env's contract (``shopsimrl.env.types``): search page
-> results -> product -> ``buy now``; a click value not on the page is answered with
``unavailable_action`` feedback; every lease must be released.  Failure injection
(``fail_on``, ``reward_override``, ``block_on``) drives the loop's error paths.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.agent.policy import PolicyTurn, ToolCall, TurnFeedback
from shopsimrl.env.types import (
    EnvError,
    LeaseConflictError,
    Observation,
    ResetResult,
    StepResult,
    Task,
    UnknownTaskError,
)

TASK = Task(
    task_id="t-1",
    split="train",
    instruction="i need red hiking boots, size 9, under 80 dollars",
    goal={"product_id": "p1", "options": {"size": "9"}},
)


def _search_tool() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": "search",
            "description": "search the shop",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }


def _click_tool(values: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": "click",
            "description": "click a button",
            "parameters": {
                "type": "object",
                "properties": {"value": {"type": "string", "enum": list(values)}},
                "required": ["value"],
            },
        },
    }


PAGES: dict[str, list[str]] = {
    "search": [],
    "results": ["back to search", "p1", "p2"],
    "product": ["back to search", "< prev", "size=9", "size=10", "buy now"],
}


def observation(page: str) -> Observation:
    clickables = PAGES.get(page, [])
    tools = [_search_tool()] if page == "search" else ([_click_tool(clickables)] if clickables else [])
    text = f"[{page} page] clickables: {', '.join(clickables) or '-'}"
    return Observation(text=text, state={"page": page, "clickables": clickables}, tools=tools)


@dataclass
class FakeEnv:
    """An in-memory EnvClient with failure injection."""

    fail_on: str | None = None  # "reset" | "step" | "terminate" | "release"
    reward_override: Any = "unset"  # replaces the final reward (None, nan, inf...)
    block_on: str | None = None  # "step" | "release": await ``gate`` before answering
    gate: asyncio.Event | None = None
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    @property
    def leased(self) -> int:
        return len(self.leases)

    async def _maybe(self, stage: str) -> None:
        if self.block_on == stage:
            assert self.gate is not None
            await self.gate.wait()
        if self.fail_on == stage:
            raise EnvError(f"injected {stage} failure", code="injected")

    async def reset(self, task_id: str) -> ResetResult:
        self.calls.append(("reset", task_id))
        await self._maybe("reset")
        if task_id != TASK.task_id:
            raise UnknownTaskError(task_id)
        lease = f"lease-{next(self._ids)}"
        self.leases[lease] = {"page": "search", "done": False, "product": None, "size": None, "steps": 0}
        return ResetResult(lease_id=lease, task=TASK, observation=observation("search"))

    def _session(self, lease_id: str) -> dict[str, Any]:
        if lease_id not in self.leases:
            raise LeaseConflictError(lease_id)
        return self.leases[lease_id]

    def _end(self, s: dict[str, Any], reward: float, reason: str, *, terminated: bool) -> StepResult:
        s["done"] = True
        s["page"] = "terminal"
        detail = {"r_strict": reward, "r_success": reward, "r_attr": reward}
        final = reward if self.reward_override == "unset" else self.reward_override
        return StepResult(
            observation=observation("terminal"),
            reward=final,
            terminated=terminated,
            truncated=not terminated,
            info={"feedback": None, "reward_detail": detail, "end_reason": reason, "steps": s["steps"]},
        )

    async def step(self, lease_id: str, action: str) -> StepResult:
        self.calls.append(("step", action))
        await self._maybe("step")
        s = self._session(lease_id)
        s["steps"] += 1
        page = s["page"]
        feedback = None
        if action.startswith("search[") and page == "search":
            s["page"] = "results"
        elif action.startswith("search["):
            feedback = {"code": "search_unavailable", "message": "there is no search box on this page"}
        elif action.startswith("click[") and action[6:-1] in PAGES.get(page, []):
            value = action[6:-1]
            if value == "back to search":
                s["page"] = "search"
            elif page == "results":
                s["page"], s["product"] = "product", value
            elif value.startswith("size="):
                s["size"] = value[5:]
            elif value == "< prev":
                s["page"] = "results"
            elif value == "buy now":
                ok = s["product"] == "p1" and s["size"] == "9"
                return self._end(s, 1.0 if ok else 0.0, "purchase", terminated=True)
        else:
            feedback = {"code": "unavailable_action", "message": f"{action} is not on this page"}
        info = {"feedback": feedback, "reward_detail": None, "end_reason": None, "steps": s["steps"]}
        return StepResult(observation=observation(s["page"]), reward=None, terminated=False, truncated=False, info=info)

    async def terminate(self, lease_id: str, reason: str) -> StepResult:
        self.calls.append(("terminate", reason))
        await self._maybe("terminate")
        s = self._session(lease_id)
        return self._end(s, 0.0, reason, terminated=False)

    async def release(self, lease_id: str) -> None:
        self.calls.append(("release", lease_id))
        await self._maybe("release")
        self.leases.pop(lease_id, None)
        self.released.append(lease_id)

    async def list_tasks(self, split: str) -> list[str]:
        return [TASK.task_id]

    async def get_task(self, task_id: str) -> Task:
        return TASK

    async def aclose(self) -> None:
        return None


def call(name: str, **arguments: Any) -> PolicyTurn:
    return PolicyTurn(text=None, tool_calls=(ToolCall(name, json.dumps(arguments), id="c"),), finish_reason="tool_calls")


def raw_call(name: str, arguments: str, text: str | None = None) -> PolicyTurn:
    return PolicyTurn(text=text, tool_calls=(ToolCall(name, arguments, id="c"),), finish_reason="tool_calls")


WINNING = [call("search", query="red hiking boots"), call("click", value="p1"), call("click", value="size=9"),
           call("click", value="buy now")]


@dataclass
class ScriptedPolicy:
    """Replays a list of turns (the last one repeats); records what it was shown."""

    turns: Sequence[PolicyTurn | BaseException]
    name: str = "scripted"
    fail_new_episode: bool = False
    seen: list[tuple[str, TurnFeedback | None]] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {"turns": len(self.turns)}

    def new_episode(self, task: Task, seed: int) -> ScriptedPolicy:
        if self.fail_new_episode:
            raise RuntimeError("cannot start")
        return self

    async def act(self, observation: Observation, feedback: TurnFeedback | None) -> PolicyTurn:
        index = min(len(self.seen), len(self.turns) - 1)
        self.seen.append((observation.text, feedback))
        turn = self.turns[index]
        if isinstance(turn, BaseException):
            raise turn
        return turn

    async def aclose(self) -> None:
        return None
