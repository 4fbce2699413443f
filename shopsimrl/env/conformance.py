"""One contract for every env client, checked the way Gymnasium's ``check_env`` checks an env.

:func:`check_env_client` plays the :class:`~shopsimrl.env.types.EnvClient` protocol
through one client and raises :class:`EnvClientConformanceError` at the first
deviation, saying which call, what was expected and what came back.  The in-process
client, the HTTP client, the multi-server pool and the tests' fake shop all pass it
(tests/env/test_conformance.py), so code written against one behaves the same on the
others: the same page order, the same feedback codes, the same error classes.

Give it a client nobody else is using while it runs: it compares ``healthz``'s lease
count before, during and after its episodes.
"""

from __future__ import annotations

import math
from typing import Any

from shopsimrl.env.pages import BACK, BUY, ITEM, NEXT, PREV, RESULTS, SEARCH
from shopsimrl.env.search import MAX_QUERY_CHARS
from shopsimrl.env.types import (
    FEEDBACK_CODES,
    HEALTHZ_KEYS,
    BadRequestError,
    EnvClient,
    EpisodeFinishedError,
    LeaseConflictError,
    Observation,
    QueryTooLongError,
    ResetResult,
    StepResult,
    Task,
    UnknownTaskError,
)
from shopsimrl.errors import InvariantBroken

MISSING_TASK = "no-such-task-00000"
NAVIGATION = (BACK, PREV, NEXT)


class EnvClientConformanceError(InvariantBroken, AssertionError):
    """The client deviates from the EnvClient contract; the message says where and how."""


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise EnvClientConformanceError(what)


async def _raises(kind: type[Exception], call: str, awaitable: Any) -> None:
    """``awaitable`` must raise ``kind`` (an env error class shared by every client)."""
    try:
        result = await awaitable
    except kind:
        return
    except Exception as exc:
        raise EnvClientConformanceError(f"{call}: expected {kind.__name__}, got {type(exc).__name__}: {exc}") from exc
    raise EnvClientConformanceError(f"{call}: expected {kind.__name__}, got a result: {result!r:.200}")


async def check_env_client(client: EnvClient, *, split: str = "train") -> None:
    """Exercise every method of the EnvClient protocol on ``client``; raise on the first deviation."""
    _require(isinstance(client, EnvClient), f"{type(client).__name__} lacks methods of the EnvClient protocol")
    idle = await _check_healthz(client, "healthz before any episode")
    task_id = await _check_tasks(client, split)
    await _check_feedback_episode(client, task_id, idle)
    await _check_purchase_episode(client, task_id)
    after = await _check_healthz(client, "healthz after the episodes")
    _require(after["leased"] == idle["leased"], f"healthz after release: leased {after['leased']}, expected {idle['leased']}")


async def _check_healthz(client: EnvClient, call: str) -> dict[str, Any]:
    health = await client.healthz()
    _require(isinstance(health, dict), f"{call}: expected a dict, got {type(health).__name__}")
    missing = [key for key in HEALTHZ_KEYS if key not in health]
    _require(not missing, f"{call}: missing keys {missing} (every client reports {', '.join(HEALTHZ_KEYS)})")
    _require(health["ready"] is True, f"{call}: ready is {health['ready']!r}, expected True")
    for key in ("slots", "free_slots", "leased"):
        _require(_is_int(health[key]) and health[key] >= 0, f"{call}: {key} is {health[key]!r}, expected an int >= 0")
    _require(health["slots"] >= 1, f"{call}: slots is {health['slots']}, expected >= 1")
    _require(health["free_slots"] <= health["slots"], f"{call}: free_slots {health['free_slots']} > slots {health['slots']}")
    _require(isinstance(health["fingerprint"], dict) and "id" in health["fingerprint"],
             f"{call}: fingerprint is {health['fingerprint']!r:.200}, expected a dict with an 'id'")
    return health


async def _check_tasks(client: EnvClient, split: str) -> str:
    task_ids = await client.list_tasks(split)
    _require(isinstance(task_ids, list) and bool(task_ids) and all(isinstance(t, str) for t in task_ids),
             f"list_tasks({split!r}): expected a non-empty list of task ids, got {task_ids!r:.200}")
    _require(len(set(task_ids)) == len(task_ids), f"list_tasks({split!r}): task ids repeat")
    await _raises(BadRequestError, "list_tasks('no-such-split')", client.list_tasks("no-such-split"))
    task_id = task_ids[0]
    task = await client.get_task(task_id)
    _require(isinstance(task, Task), f"get_task({task_id!r}): expected a Task, got {type(task).__name__}")
    _require(task.task_id == task_id and task.split == split,
             f"get_task({task_id!r}): got task {task.task_id!r} of split {task.split!r}")
    _require(isinstance(task.instruction, str) and bool(task.instruction.strip()),
             f"get_task({task_id!r}): empty instruction")
    await _raises(UnknownTaskError, f"get_task({MISSING_TASK!r})", client.get_task(MISSING_TASK))
    await _raises(UnknownTaskError, f"reset({MISSING_TASK!r})", client.reset(MISSING_TASK))
    return task_id


async def _reset(client: EnvClient, task_id: str) -> ResetResult:
    reset = await client.reset(task_id)
    _require(isinstance(reset, ResetResult), f"reset: expected a ResetResult, got {type(reset).__name__}")
    _require(isinstance(reset.lease_id, str) and bool(reset.lease_id), f"reset: lease_id is {reset.lease_id!r}")
    _require(reset.task == await client.get_task(task_id), "reset: its task differs from get_task's")
    _check_observation(reset.observation, "reset", page=SEARCH)
    names = [tool.get("function", {}).get("name") for tool in reset.observation.tools]
    _require("search" in names, f"reset: the search page offers tools {names}, expected a 'search' tool")
    return reset


def _check_observation(observation: Observation, call: str, *, page: str | None = None) -> None:
    _require(isinstance(observation, Observation), f"{call}: expected an Observation, got {type(observation).__name__}")
    _require(isinstance(observation.text, str) and bool(observation.text), f"{call}: empty observation text")
    state = observation.state
    _require(isinstance(state, dict) and isinstance(state.get("clickables"), list),
             f"{call}: observation state needs a 'clickables' list, got {state!r:.200}")
    _require(isinstance(observation.tools, list) and all(isinstance(t, dict) for t in observation.tools),
             f"{call}: tools must be a list of tool schemas")
    if page is not None:
        _require(state.get("page") == page, f"{call}: on page {state.get('page')!r}, expected {page!r}")


def _check_step(result: StepResult, call: str, *, feedback: str | None, steps: int) -> StepResult:
    """A step that did not end the episode: no reward, ``feedback`` code (or none), ``steps`` actions so far."""
    _require(isinstance(result, StepResult), f"{call}: expected a StepResult, got {type(result).__name__}")
    _check_observation(result.observation, call)
    _require(not result.terminated and not result.truncated and result.reward is None,
             f"{call}: expected a running episode without reward, got terminated={result.terminated} "
             f"truncated={result.truncated} reward={result.reward!r}")
    given = result.info.get("feedback")
    code = given.get("code") if isinstance(given, dict) else given
    _require(code == feedback, f"{call}: feedback code {code!r}, expected {feedback!r}")
    if isinstance(given, dict):
        _require(code in FEEDBACK_CODES and isinstance(given.get("message"), str) and bool(given["message"]),
                 f"{call}: feedback {given!r} needs a code of FEEDBACK_CODES and a message")
    _require(result.info.get("steps") == steps, f"{call}: info['steps'] is {result.info.get('steps')!r}, expected {steps}")
    return result


def _check_ended(result: StepResult, call: str, *, reason: str) -> None:
    _require(result.done and result.terminated == (reason == "purchase"),
             f"{call}: expected an episode ended by {reason}, got terminated={result.terminated} truncated={result.truncated}")
    _require(result.info.get("end_reason") == reason, f"{call}: end_reason {result.info.get('end_reason')!r}, expected {reason!r}")
    reward = result.reward
    _require(_is_number(reward) and 0.0 <= reward <= 1.0, f"{call}: final reward {reward!r}, expected a number in [0, 1]")
    detail = result.info.get("reward_detail")
    _require(isinstance(detail, dict) and detail.get("r_strict") == reward and detail.get("r_success") in (0, 1),
             f"{call}: reward_detail {detail!r:.200} needs r_strict = the reward and r_success 0 or 1")
    if reason != "purchase":
        _require(reward == 0.0, f"{call}: an episode ended by {reason} scores 0, got {reward!r}")


async def _check_feedback_episode(client: EnvClient, task_id: str, idle: dict[str, Any]) -> None:
    """Invalid actions are feedback (the step counts), a too-long query is an error (it does not), then terminate."""
    reset = await _reset(client, task_id)
    lease = reset.lease_id
    during = await _check_healthz(client, "healthz during an episode")
    _require(during["leased"] == idle["leased"] + 1, f"healthz during an episode: leased {during['leased']}, "
             f"expected {idle['leased'] + 1}")
    try:
        _check_step(await client.step(lease, "hello"), "step('hello')", feedback="invalid_format", steps=1)
        _check_step(await client.step(lease, "search[]"), "step('search[]')", feedback="empty_argument", steps=2)
        _check_step(await client.step(lease, "click[no such button]"), "step('click[no such button]')",
                    feedback="unavailable_action", steps=3)
        long_query = "search[" + "x" * (MAX_QUERY_CHARS + 1) + "]"
        await _raises(QueryTooLongError, "step(search[<513 characters>])", client.step(lease, long_query))
        query = _query(reset.task)
        results = _check_step(await client.step(lease, f"search[{query}]"), "step(search[<the instruction>])",
                              feedback=None, steps=4)
        _require(results.observation.state.get("page") == RESULTS,
                 f"step(search[...]): on page {results.observation.state.get('page')!r}, expected {RESULTS!r}")
        _check_step(await client.step(lease, "search[again]"), "step(search[...]) on the results page",
                    feedback="search_unavailable", steps=5)
        await _raises(BadRequestError, "terminate(lease, 'no-such-reason')", client.terminate(lease, "no-such-reason"))
        ended = await client.terminate(lease, "action_limit")
        _check_ended(ended, "terminate(lease, 'action_limit')", reason="action_limit")
        await _raises(EpisodeFinishedError, "step after the end", client.step(lease, "search[more]"))
        await _raises(EpisodeFinishedError, "terminate after the end", client.terminate(lease, "action_limit"))
    finally:
        await client.release(lease)
    await _raises(LeaseConflictError, "step on a released lease", client.step(lease, "search[x]"))
    await _raises(LeaseConflictError, "terminate on a released lease", client.terminate(lease, "action_limit"))
    await _raises(LeaseConflictError, "release of a released lease", client.release(lease))
    await _raises(LeaseConflictError, "step on a lease never issued", client.step("not-a-lease", "search[x]"))


async def _check_purchase_episode(client: EnvClient, task_id: str) -> None:
    """Search, open the first product, pick the first value of every option, buy: a scored purchase."""
    reset = await _reset(client, task_id)
    lease = reset.lease_id
    try:
        query = _query(reset.task)
        page = await client.step(lease, f"search[{query}]")
        products = [c for c in page.observation.state["clickables"] if c not in NAVIGATION]
        _require(bool(products), f"search[{query}]: no product on the results page")
        page = await client.step(lease, f"click[{products[0]}]")
        _require(page.observation.state.get("page") == ITEM,
                 f"click[<product>]: on page {page.observation.state.get('page')!r}, expected {ITEM!r}")
        steps = 2
        axes: dict[str, str] = {}
        for clickable in page.observation.state["clickables"]:
            axis, sep, _ = clickable.partition("=")
            if sep and axis not in axes:
                axes[axis] = clickable
        if axes:
            steps += 1
            _check_step(await client.step(lease, f"click[{BUY}]"), "click[buy now] before choosing options",
                        feedback="incomplete_options", steps=steps)
        for n, clickable in enumerate(axes.values()):
            steps += 1
            _check_step(await client.step(lease, f"click[{clickable}]"), f"click[{clickable}]", feedback=None, steps=steps)
            if n == 0:
                steps += 1
                _check_step(await client.step(lease, f"click[{clickable}]"), f"click[{clickable}] twice",
                            feedback="already_selected", steps=steps)
        _check_ended(await client.step(lease, f"click[{BUY}]"), "click[buy now]", reason="purchase")
    finally:
        await client.release(lease)


def _query(task: Task) -> str:
    """The task's own instruction as the search query: it finds products on any catalog."""
    return " ".join(task.instruction.replace("[", " ").replace("]", " ").split())[:MAX_QUERY_CHARS]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
