"""Every kind of hostile reply (``hostile_model.CASES``) is filed by the rule of docs/agent.md, never raised.

The real ``openai`` policy over real HTTP (the hostile server on a thread, 127.0.0.1) plays one episode
per case on the real ShopSim env: the model's mistakes are scored with their protocol code, the model's
odd actions are played, the server's wrong shapes and sizes are technical failures whose message says what
it sent (one line, no control character), a token count that is no whole number is not known.  Every
episode leaves a trace that parses.  The same cases run as real processes in the fault suite
(``tests/faults/test_hostile_model_server.py``), with the rollout's memory measured.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_model import CASES, MANY_CALLS, HostileServer, serving

from shopsimrl.agent import OpenAIPolicy, make_policy, run_episode
from shopsimrl.agent.model_reply import HISTORY_MAX_CALLS, HISTORY_MAX_CHARS, BadModelReply, clip_reply, read_reply
from shopsimrl.agent.policy import ToolCall
from shopsimrl.env import InProcessEnvClient
from shopsimrl.env.core import ShopSimEnv

MAX_TURNS = 2
CONTROL = [chr(c) for c in (*range(0x20), 0x7F)]


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with serving() as server:
        yield server


@pytest.fixture(scope="module")
def shop(small_catalog: Path) -> Iterator[ShopSimEnv]:
    with ShopSimEnv(small_catalog, slots=4) as env:
        yield env


async def play(hostile: HostileServer, shop: ShopSimEnv, case: str, trace: Path, **options: Any):
    policy = make_policy("openai", base_url=hostile.base_url(case), model="m", max_retries=1, timeout=30.0,
                         retry_initial_delay=0.01, retry_max_delay=0.01,
                         action_format="constrained" if CASES[case].constrained else "tools", **options)
    assert isinstance(policy, OpenAIPolicy)
    env = InProcessEnvClient(shop)
    try:
        task_id = (await env.list_tasks("train"))[0]
        return await run_episode(env, policy, task_id, rollout_id="r", seed=1, max_turns=MAX_TURNS, trace_path=trace)
    finally:
        await policy.aclose()
        await env.aclose()


@pytest.mark.parametrize("case", list(CASES))
async def test_each_hostile_reply_is_filed_by_the_rule(hostile: HostileServer, shop: ShopSimEnv, case: str,
                                                       tmp_path: Path) -> None:
    expected = CASES[case].filed
    result = await play(hostile, shop, case, tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))  # written, whatever the reply held
    assert trace["scored"] == result.scored and shop.pool.counters()["leased"] == 0
    if expected.startswith("technical:"):
        assert not result.scored and result.error is not None
        assert (result.error["stage"], result.error["type"]) == ("policy", expected.split(":")[1]), result.error
        message = result.error["message"]
        assert not any(c in message for c in CONTROL) and "object has no attribute" not in message, message
        return
    assert result.scored and result.error is None, result.error
    codes = [step["protocol_error"]["code"] if step["protocol_error"] else None for step in trace["steps"]]
    if expected.startswith("model:") and expected != "model:action":
        assert codes == [expected.split(":")[1]] * MAX_TURNS and result.env_steps == 0
        return
    assert codes == [None] * MAX_TURNS and result.env_steps == MAX_TURNS  # played: the env took the action
    if expected == "unknown-count":
        assert result.prompt_tokens is None or result.completion_tokens is None
    else:
        assert expected == "model:action", expected


@pytest.mark.parametrize(("case", "says"), [
    ("choices-string", "the model server sent `choices` as a string ('oops'), expected a non-empty list"),
    ("tool-calls-string", "sent `message.tool_calls` as a string ('oops'), expected a list or null"),
    ("tool-calls-null-item", "sent `tool_calls[0]` as null, expected an object"),
    ("name-number", "sent `tool_calls[0].function.name` as a number (7), expected a string or null"),
    ("body-deep", "answer is not JSON"),
    ("body-200mb-declared", "announces 209,715,200 bytes, more than the 8,388,608 a model server may send"),
    ("body-endless", "goes on past 8,388,608 bytes, the most a model server may send; stopped reading it"),
    ("error-escapes", "the model server answered HTTP 500: \\x1b[2J\\x1b]0;owned\\x07boom\\x00"),
])
async def test_a_technical_failure_says_what_the_server_sent(hostile: HostileServer, shop: ShopSimEnv, case: str,
                                                             says: str, tmp_path: Path) -> None:
    result = await play(hostile, shop, case, tmp_path / "t.json")
    assert says in result.error["message"], result.error


@pytest.mark.parametrize("case", ["many-tool-calls", "content-megabytes"])
async def test_a_reply_that_is_no_action_is_cut_in_the_history_and_the_trace_says_so(
        hostile: HostileServer, shop: ShopSimEnv, case: str, tmp_path: Path) -> None:
    hostile.requests.pop(case, None)
    result = await play(hostile, shop, case, tmp_path / "t.json")
    assert result.scored
    second = json.loads(hostile.requests[case][1])  # the request after the hostile reply
    assert len(hostile.requests[case][1]) < 100_000  # not the megabytes the reply held
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert len(assistant.get("tool_calls") or ()) <= HISTORY_MAX_CALLS
    assert len(assistant.get("content") or "") <= HISTORY_MAX_CHARS + 1000  # the markup of calls sent as text
    assert sum(m["role"] == "tool" for m in second["messages"]) <= HISTORY_MAX_CALLS
    step = json.loads((tmp_path / "t.json").read_text())["steps"][0]
    assert "was cut in the conversation sent back" in step["output"]["cut"]
    if case == "many-tool-calls":
        assert f"{MANY_CALLS - HISTORY_MAX_CALLS:,} of its {MANY_CALLS:,} tool calls" in step["output"]["cut"]
        assert f"made {MANY_CALLS} tool calls" in step["protocol_error"]["message"]  # the mistake counts them all


async def test_half_a_surrogate_pair_reaches_the_env_and_the_trace_as_a_replacement_character(
        hostile: HostileServer, shop: ShopSimEnv, tmp_path: Path) -> None:
    result = await play(hostile, shop, "arguments-surrogate", tmp_path / "t.json")
    trace = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert result.scored and trace["steps"][0]["action"] == "search[boots \ufffd]"
    assert "boots \ufffd" in trace["steps"][0]["observation"] + trace["steps"][1]["observation"]


def test_the_reader_rules_on_their_own() -> None:
    """Named examples of the rule, without a server."""
    reply = read_reply({"choices": [{"message": {"content": "a\ud800", "tool_calls": None}, "finish_reason": None}],
                        "usage": {"prompt_tokens": "12", "completion_tokens": 3}})
    assert (reply.text, reply.finish_reason, reply.prompt_tokens, reply.completion_tokens) == ("a\ufffd", "stop", None, 3)
    for body, says in [(None, "not JSON"), ([], "its answer as a list"), ({"choices": "oops"}, "`choices` as a string"),
                       ({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, "name` as null")]:
        with pytest.raises(BadModelReply, match=says):
            read_reply(body)
    text, calls, cut = clip_reply("x" * (HISTORY_MAX_CHARS + 5), [ToolCall("search", "{}", f"c{i}") for i in range(10)])
    assert text is not None and len(text) == HISTORY_MAX_CHARS and len(calls) == HISTORY_MAX_CALLS
    assert cut == ("the reply was cut in the conversation sent back: 2 of its 10 tool calls and 5 characters of its "
                   "text and arguments left out")
    assert clip_reply("ok", [ToolCall("search", '{"query": "a"}')]) == ("ok", (ToolCall("search", '{"query": "a"}'),),
                                                                        None)


def test_docs_file_every_case_as_the_tests_do() -> None:
    """docs/agent.md's table ("What a reply may hold") has one row per case, filed as ``CASES`` says."""
    rows = {line.split("|")[1].strip().strip("`"): line for line in
            (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `") and line.count("|") >= 5}
    for name, case in CASES.items():
        row = rows.get(name)
        assert row is not None, f"docs/agent.md has no row for {name}"
        kind, _, detail = case.filed.partition(":")
        said = {"technical": f"technical: `{detail}`", "unknown-count": "count not known",
                "model": "an action, played" if detail == "action" else f"mistake: `{detail}`"}[kind]
        assert said in row, (name, row)
