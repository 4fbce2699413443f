"""Test doubles for the agent tests (imported as ``agent.fakes``; ``tests`` is on the pytest path): a tiny in-memory shop and a scripted policy.

The fake shop follows the real env's contract (``shopsimrl.env.types``; it passes
``shopsimrl.env.conformance.check_env_client``, tests/env/test_conformance.py): search page
-> results -> item -> ``buy now`` once every option is chosen; invalid actions are answered
with the real feedback codes; stale leases, ended episodes and unknown tasks raise the real
error classes; every lease must be released.  Failure injection (``fail_on``,
``reward_override``, ``block_on``) drives the loop's error paths.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.agent.policy import PolicyTurn, ToolCall, TurnFeedback
from shopsimrl.env.search import MAX_QUERY_CHARS
from shopsimrl.env.types import (
    TERMINATE_REASONS,
    BadRequestError,
    EnvError,
    EpisodeFinishedError,
    LeaseConflictError,
    NoFreeSlotError,
    Observation,
    QueryTooLongError,
    ResetResult,
    StepResult,
    Task,
    UnknownTaskError,
)

ACTION = re.compile(r"^(search|click)\[(.*)\]$", re.S)

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
    "item": ["back to search", "< prev", "size=9", "size=10", "buy now"],
}


def observation(page: str, *, size_chosen: bool = True) -> Observation:
    clickables = [c for c in PAGES.get(page, []) if size_chosen or c != "buy now"]  # buy once options are chosen
    tools = [_search_tool()] if page == "search" else ([_click_tool(clickables)] if clickables else [])
    text = f"[{page} page] clickables: {', '.join(clickables) or '-'}"
    return Observation(text=text, state={"page": page, "clickables": clickables, "search_available": page == "search"},
                       tools=tools)


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
    slots: int = 64
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
        if len(self.leases) >= self.slots:
            raise NoFreeSlotError(f"all {self.slots} slots are leased")
        lease = f"lease-{next(self._ids)}"
        self.leases[lease] = {"page": "search", "done": False, "product": None, "size": None, "steps": 0}
        return ResetResult(lease_id=lease, task=TASK, observation=observation("search"))

    def _session(self, lease_id: str) -> dict[str, Any]:
        if lease_id not in self.leases:
            raise LeaseConflictError(lease_id)
        return self.leases[lease_id]

    def _live(self, lease_id: str) -> dict[str, Any]:
        s = self._session(lease_id)
        if s["done"]:
            raise EpisodeFinishedError("the episode has ended; release the lease")
        return s

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
        s = self._live(lease_id)
        feedback, bought = self._apply(s, action)  # raises QueryTooLongError before the step counts
        s["steps"] += 1
        if bought is not None:
            return self._end(s, bought, "purchase", terminated=True)
        info = {"feedback": feedback, "reward_detail": None, "end_reason": None, "steps": s["steps"]}
        size_chosen = s["size"] is not None or s["page"] != "item"
        return StepResult(observation=observation(s["page"], size_chosen=size_chosen), reward=None,
                          terminated=False, truncated=False, info=info)

    @staticmethod
    def _apply(s: dict[str, Any], action: str) -> tuple[dict[str, str] | None, float | None]:
        """(feedback, reward of a purchase) for one action, changing the session in place."""
        match = ACTION.match(action)
        if match is None:
            return {"code": "invalid_format", "message": "use search[<query>] or click[<value>]"}, None
        kind, argument = match.group(1), match.group(2).strip()
        if not argument:
            return {"code": "empty_argument", "message": f"{kind}[] needs an argument"}, None
        page = s["page"]
        if kind == "search":
            if page != "search":
                return {"code": "search_unavailable", "message": "there is no search box on this page"}, None
            if len(argument) > MAX_QUERY_CHARS:
                raise QueryTooLongError(f"query is {len(argument)} characters; the limit is {MAX_QUERY_CHARS}")
            s["page"] = "results"
            return None, None
        if page == "item" and argument == "buy now" and s["size"] is None:
            return {"code": "incomplete_options", "message": "choose a size first"}, None
        if argument not in PAGES.get(page, []):
            return {"code": "unavailable_action", "message": f"{action} is not on this page"}, None
        if argument == "back to search":
            s["page"], s["product"], s["size"] = "search", None, None
        elif page == "results":
            s["page"], s["product"], s["size"] = "item", argument, None
        elif argument.startswith("size="):
            if s["size"] == argument[5:]:
                return {"code": "already_selected", "message": f"{argument} is already selected"}, None
            s["size"] = argument[5:]
        elif argument == "< prev":
            s["page"], s["product"], s["size"] = "results", None, None
        elif argument == "buy now":
            return None, 1.0 if s["product"] == "p1" and s["size"] == "9" else 0.0
        return None, None

    async def terminate(self, lease_id: str, reason: str) -> StepResult:
        self.calls.append(("terminate", reason))
        await self._maybe("terminate")
        if reason not in TERMINATE_REASONS:
            raise BadRequestError(f"reason must be one of {', '.join(TERMINATE_REASONS)}, got {reason!r}")
        s = self._live(lease_id)
        return self._end(s, 0.0, reason, terminated=False)

    async def release(self, lease_id: str) -> None:
        self.calls.append(("release", lease_id))
        await self._maybe("release")
        if self.leases.pop(lease_id, None) is None:
            raise LeaseConflictError("unknown, released or expired lease id")
        self.released.append(lease_id)

    async def list_tasks(self, split: str) -> list[str]:
        if split not in ("train", "val", "test"):
            raise BadRequestError(f"unknown split {split!r}; expected one of train, val, test")
        return [TASK.task_id] if split == TASK.split else []

    async def get_task(self, task_id: str) -> Task:
        if task_id != TASK.task_id:
            raise UnknownTaskError(task_id)
        return TASK

    async def healthz(self) -> dict[str, Any]:
        return {"ready": True, "slots": self.slots, "free_slots": self.slots - len(self.leases),
                "leased": len(self.leases), "fingerprint": {"id": "fake-shop"}}

    async def aclose(self) -> None:
        return None


def call(name: str, **arguments: Any) -> PolicyTurn:
    return PolicyTurn(text=None, tool_calls=(ToolCall(name, json.dumps(arguments), id="c"),), finish_reason="tool_calls")


def raw_call(name: str, arguments: str, text: str | None = None) -> PolicyTurn:
    return PolicyTurn(text=text, tool_calls=(ToolCall(name, arguments, id="c"),), finish_reason="tool_calls")


WINNING = [call("search", query="red hiking boots"), call("click", value="p1"), call("click", value="size=9"),
           call("click", value="buy now")]
#: The page after each of WINNING's first three moves (``buy now`` is offered once the size is chosen).
WINNING_PAGES = [observation("results"), observation("item", size_chosen=False), observation("item")]


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
