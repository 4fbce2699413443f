"""The ``openai`` policy, over real HTTP (httpx, a capped and typed reader) to a scripted server.

The server (``agent.openai_fake``) plays an OpenAI-compatible chat-completions server on
127.0.0.1: it answers each request with the next scripted reply (well-formed, malformed,
or an HTTP error) and records every request body, so the tests check both what the model
was sent and how its replies are handled.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from agent.fakes import TASK, FakeEnv, observation
from agent.openai_fake import ScriptedServer, error, reply

from shopsimrl.agent import OpenAIPolicy, make_policy, run_episode
from shopsimrl.agent.messages import DEFAULT_SYSTEM_PROMPT, EPISODE_TOOLS
from shopsimrl.agent.openai_policy import request_seed

SEARCH = ("search", '{"query": "red hiking boots"}')
WIN = [reply(SEARCH), reply(("click", '{"value": "p1"}')), reply(("click", '{"value": "size=9"}')),
       reply(("click", '{"value": "buy now"}'))]


def policy(server: ScriptedServer, **options: Any) -> OpenAIPolicy:
    options = {"base_url": server.base_url, "model": "test-model", "retry_initial_delay": 0.01, "retry_max_delay": 0.02,
               "timeout": 10.0, **options}
    built = make_policy("openai", **options)
    assert isinstance(built, OpenAIPolicy)
    return built


async def episode(server: ScriptedServer, env: FakeEnv, **options: Any):
    p = policy(server, **options)
    try:
        return await run_episode(env, p, TASK.task_id, rollout_id="r", seed=5)
    finally:
        await p.aclose()


async def test_a_winning_conversation_and_the_requests_it_sends(server: ScriptedServer, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.load(*WIN)
    env = FakeEnv()
    result = await episode(server, env)
    assert result.scored and result.reward == 1.0 and result.turns == 4
    assert (result.prompt_tokens, result.completion_tokens) == (400, 40)
    assert env.leased == 0

    first, second, last = server.requests[0], server.requests[1], server.requests[-1]
    assert first["model"] == "test-model"
    assert first["temperature"] == 0.6 and first["top_p"] == 1.0 and first["max_tokens"] == 1024
    assert "seed" not in first
    assert first["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    user = first["messages"][1]
    assert user["role"] == "user" and TASK.instruction in user["content"] and observation("search").text in user["content"]
    assert len(first["messages"]) == 2
    assert first["tools"] == EPISODE_TOOLS  # one fixed list: the page text says what is valid now
    assert first["parallel_tool_calls"] is False

    assistant, tool = second["messages"][2], second["messages"][3]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [{"id": "call_0_search", "type": "function",
                                        "function": {"name": "search", "arguments": SEARCH[1]}}]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_0_search"
    assert tool["content"] == observation("results").text + "\n(turns left: 29)\n"
    assert all(request["tools"] == EPISODE_TOOLS for request in server.requests)
    assert [m["role"] for m in last["messages"]] == ["system", "user"] + ["assistant", "tool"] * 3
    assert server.headers[0]["authorization"] == "Bearer EMPTY"


async def test_api_key_comes_from_the_configured_variable(server: ScriptedServer, monkeypatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test-123")
    server.load(*WIN)
    result = await episode(server, FakeEnv(), api_key_env="MY_KEY", temperature=0.9, top_p=0.8, max_tokens=64,
                           send_seed=True, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert result.scored
    assert server.headers[0]["authorization"] == "Bearer sk-test-123"
    body = server.requests[0]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.9, 0.8, 64)
    seeds = [request["seed"] for request in server.requests]
    assert seeds == [request_seed(5, turn) for turn in range(4)] and len(set(seeds)) == 4  # per episode and turn
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "sk-test-123" not in json.dumps(policy(server, api_key_env="MY_KEY").describe())


async def test_two_tool_calls_are_answered_each_with_the_error(server: ScriptedServer) -> None:
    server.load(reply(SEARCH, ("search", '{"query": "boots"}')), *WIN)
    result = await episode(server, FakeEnv())
    assert result.scored and result.reward == 1.0 and result.protocol_errors == 1 and result.turns == 5
    messages = server.requests[1]["messages"]
    tools = [m for m in messages if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == ["call_0_search", "call_1_search"]
    assert all("exactly one tool call" in t["content"] for t in tools)


@pytest.mark.parametrize(
    ("bad", "expect"),
    [
        (reply(SEARCH, text="Sure, searching now."), "text beside the tool call"),
        (reply(("search", '{"query": 42}')), "Invalid arguments for search"),  # JSON, wrong type: answered as a tool
        (reply(("checkout", "{}")), "no tool named 'checkout'"),
    ],
)
async def test_malformed_call_is_fed_back_as_a_tool_message(server: ScriptedServer, bad, expect: str) -> None:
    server.load(bad, *WIN)
    result = await episode(server, FakeEnv())
    assert result.scored and result.protocol_errors == 1 and result.reward == 1.0
    feedback = server.requests[1]["messages"][-1]
    assert feedback["role"] == "tool" and feedback["tool_call_id"] == "call_0_" + bad.body["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
    assert expect in feedback["content"]


async def test_no_tool_call_is_fed_back_as_a_user_message(server: ScriptedServer) -> None:
    server.load(reply(text="I think I should search."), *WIN)
    result = await episode(server, FakeEnv())
    assert result.scored and result.protocol_errors == 1
    messages = server.requests[1]["messages"]
    assert messages[2] == {"role": "assistant", "content": "I think I should search."}
    assert messages[3]["role"] == "user" and "called no tool" in messages[3]["content"]


async def test_env_feedback_reaches_the_model_with_the_page(server: ScriptedServer) -> None:
    server.load(WIN[0], reply(("click", '{"value": "p9"}')), *WIN[1:])
    result = await episode(server, FakeEnv())
    assert result.scored and result.protocol_errors == 0 and result.env_steps == 5
    tool = server.requests[2]["messages"][-1]
    assert tool["role"] == "tool" and "not on this page" in tool["content"]
    assert observation("results").text in tool["content"]


async def test_length_cut_without_tool_call_ends_the_episode(server: ScriptedServer) -> None:
    server.load(WIN[0], reply(text="Let me consider the options one by", finish="length"))
    env = FakeEnv()
    result = await episode(server, env)
    assert result.scored and result.reward == 0.0 and result.end_reason == "generation_length"
    assert ("terminate", "generation_length") in env.calls and len(server.requests) == 2


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_transient_errors_are_retried(server: ScriptedServer, status: int) -> None:
    server.load(error(status), error(status), *WIN)
    result = await episode(server, FakeEnv())
    assert result.scored and result.reward == 1.0
    assert len(server.requests) == 6
    assert server.requests[0] == server.requests[2]  # the same request, resent


async def test_retries_are_bounded(server: ScriptedServer) -> None:
    server.load(*[error(500)] * 10)
    env = FakeEnv()
    result = await episode(server, env, max_retries=2)
    assert not result.scored and result.error["stage"] == "policy" and result.error["type"] == "ServerRefused"
    assert result.error["message"] == "the model server answered HTTP 500: status 500"
    assert len(server.requests) == 3 and env.leased == 0


@pytest.mark.parametrize("status", [400, 401, 404, 409, 408])
async def test_client_errors_are_not_retried(server: ScriptedServer, status: int) -> None:
    server.load(error(status), *WIN)
    env = FakeEnv()
    result = await episode(server, env)
    assert not result.scored and result.error["stage"] == "policy" and result.error["type"] == "ServerRefused"
    assert result.error["message"] == f"the model server answered HTTP {status}: status {status}"
    assert len(server.requests) == 1 and env.leased == 0


async def test_unreachable_server_is_retried_then_unscored() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    p = OpenAIPolicy(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, retry_initial_delay=0.01, retry_max_delay=0.01)
    env = FakeEnv()
    result = await run_episode(env, p, TASK.task_id, rollout_id="r", seed=0)
    await p.aclose()
    assert not result.scored and result.error["stage"] == "policy" and result.error["type"] == "ServerUnreachable"
    assert "ConnectError" in result.error["message"] and env.leased == 0


def test_options_are_validated_and_described() -> None:
    with pytest.raises(ValueError, match="top_p"):
        OpenAIPolicy(top_p=0)
    with pytest.raises(TypeError):
        OpenAIPolicy(temprature=0.5)
    described = OpenAIPolicy().describe()
    assert described["temperature"] == 0.6 and described["top_p"] == 1.0 and described["api_key_env"] == "OPENAI_API_KEY"
    assert "system_prompt" not in described


def test_importing_the_agent_does_not_import_openai() -> None:
    import subprocess
    import sys

    code = "import sys, shopsimrl.agent.openai_policy; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


async def test_shopsim_pages_are_not_doubled_in_the_messages() -> None:
    """ShopSim pages already start with the instruction and the env's feedback line: no repeats."""
    from shopsimrl.agent import ToolCall, TurnFeedback
    from shopsimrl.agent.model_reply import ModelReply
    from shopsimrl.env import Observation

    sent: list[list[dict[str, Any]]] = []

    async def complete(request):
        sent.append([dict(m) for m in request["messages"]])
        return ModelReply(text=None, tool_calls=(ToolCall("click", '{"value": "x"}', "c1"),), finish_reason="tool_calls",
                          prompt_tokens=None, completion_tokens=None)

    p = OpenAIPolicy()
    p.complete = complete  # type: ignore[method-assign]
    episode = p.new_episode(TASK, 0)
    page = Observation(text=f"Instruction: {TASK.instruction}\n\n[Search page]\n", state={}, tools=[])
    await episode.act(page, None)
    assert sent[0][1]["content"] == page.text
    refused = Observation(text=f"Invalid action (unavailable_action): 'x' is not clickable here\n\n{page.text}",
                          state={}, tools=[])
    await episode.act(refused, TurnFeedback("env", "unavailable_action", "'x' is not clickable here"))
    assert sent[1][-1] == {"role": "tool", "tool_call_id": "c1", "content": refused.text}
