"""A model's mistakes are the model's: scored (feedback or reward 0), never a technical failure.

Each mistake is played by the real ``openai`` policy against the scripted chat server on
127.0.0.1 (``agent.openai_fake``, with the wording of llama.cpp, vLLM, SGLang and OpenAI),
on the real ShopSim env through BOTH clients: in-process and over HTTP (a real server
thread on 127.0.0.1).  The two clients must give the same outcome and the same feedback.
Transport failures (connection refused, other 5xx, the whole-request timeout) stay
technical.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent.openai_fake import (
    LLAMA_CPP_BAD_TOOL_CALL,
    LLAMA_CPP_CONTEXT,
    OPENAI_CONTEXT,
    SGLANG_BAD_TOOL_CALL,
    SGLANG_CONTEXT,
    VLLM_CONTEXT,
    VLLM_RAW_TOOL_CALL,
    Reply,
    ScriptedServer,
    error,
    reply,
)

from shopsimrl.agent import EpisodeResult, OpenAIPolicy, make_policy, run_episode
from shopsimrl.agent.openai_policy import retry_after_seconds
from shopsimrl.env import HttpEnvClient, InProcessEnvClient
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.server import ServerThread
from shopsimrl.env.types import EnvClient

pytestmark = pytest.mark.slow  # real model servers: with -n this file starts first

SEARCH = reply(("search", '{"query": "boots"}'))
MAX_TURNS = 4


@pytest.fixture(scope="module")
def shop(small_catalog: Path) -> Iterator[ShopSimEnv]:
    with ShopSimEnv(small_catalog, slots=4) as env:
        yield env


@pytest.fixture(scope="module")
def shop_url(shop: ShopSimEnv) -> Iterator[str]:
    with ServerThread(shop) as thread:
        yield thread.url


@pytest.fixture(params=["in-process", "http"])
async def env(request: pytest.FixtureRequest, shop: ShopSimEnv, shop_url: str) -> AsyncIterator[EnvClient]:
    client: Any = InProcessEnvClient(shop) if request.param == "in-process" else HttpEnvClient(shop_url, shards=1)
    yield client
    await client.aclose()
    assert shop.pool.counters()["leased"] == 0


def policy(server: ScriptedServer, **options: Any) -> OpenAIPolicy:
    options = {"base_url": server.base_url, "model": "m", "retry_initial_delay": 0.01, "retry_max_delay": 0.02,
               "timeout": 10.0, **options}
    built = make_policy("openai", **options)
    assert isinstance(built, OpenAIPolicy)
    return built


async def play(server: ScriptedServer, env: EnvClient, *replies: Reply, tmp_path: Path | None = None,
               **options: Any) -> EpisodeResult:
    server.load(*replies)
    p = policy(server, **options)
    task_id = (await env.list_tasks("train"))[0]
    trace = tmp_path / "trace.json" if tmp_path is not None else None
    try:
        return await run_episode(env, p, task_id, rollout_id="r", seed=3, max_turns=MAX_TURNS, trace_path=trace)
    finally:
        await p.aclose()


def last_message(server: ScriptedServer, request: int) -> dict[str, Any]:
    return server.requests[request]["messages"][-1]


@pytest.mark.parametrize("bad", [LLAMA_CPP_BAD_TOOL_CALL, SGLANG_BAD_TOOL_CALL, VLLM_RAW_TOOL_CALL],
                         ids=["llama.cpp-500", "sglang-400", "vllm-raw-text"])
async def test_an_unparsable_tool_call_is_invalid_arguments_not_resampled(server: ScriptedServer, env: EnvClient,
                                                                          bad: Reply, tmp_path: Path) -> None:
    result = await play(server, env, SEARCH, bad, *[SEARCH] * 2, tmp_path=tmp_path)
    assert result.scored and result.error is None and result.end_reason == "action_limit" and result.reward == 0.0
    assert (result.turns, result.protocol_errors) == (MAX_TURNS, 1)
    assert len(server.requests) == MAX_TURNS  # one request per turn: the bad output was not silently resampled
    feedback = last_message(server, 2)
    assert "could not be parsed" in feedback["content"] and "The page has not changed." in feedback["content"]
    step = json.loads((tmp_path / "trace.json").read_text())["steps"][1]
    assert step["protocol_error"]["code"] == "invalid_arguments" and step["action"] is None


@pytest.mark.parametrize("overflow", [LLAMA_CPP_CONTEXT, VLLM_CONTEXT, OPENAI_CONTEXT, SGLANG_CONTEXT],
                         ids=["llama.cpp", "vllm", "openai", "sglang"])
async def test_a_context_overflow_ends_the_episode_as_generation_length(server: ScriptedServer, env: EnvClient,
                                                                        overflow: Reply) -> None:
    result = await play(server, env, SEARCH, overflow)
    assert result.scored and result.end_reason == "generation_length" and result.reward == 0.0
    assert len(server.requests) == 2 and result.turns == 2


async def test_the_client_side_context_budget_cuts_before_the_server_must_refuse(server: ScriptedServer,
                                                                                 env: EnvClient) -> None:
    # The first answer reports 100 + 10 tokens; the next prompt (the results page) would not fit in 150 with room.
    result = await play(server, env, SEARCH, SEARCH, max_tokens=32, max_context_tokens=150)
    assert result.scored and result.end_reason == "generation_length" and result.reward == 0.0
    assert len(server.requests) == 1  # the cut happened here, the server never saw the over-long prompt


async def test_the_budget_lowers_max_tokens_to_what_still_fits(server: ScriptedServer, env: EnvClient) -> None:
    await play(server, env, SEARCH, SEARCH, *[SEARCH] * 2, max_tokens=4000, max_context_tokens=20000)
    first, second = (r["max_tokens"] for r in server.requests[:2])
    assert first == 4000 and second < 20000 - 110 and second > 0


async def test_an_over_long_click_value_is_env_feedback_on_both_clients(server: ScriptedServer, env: EnvClient) -> None:
    long_click = reply(("click", json.dumps({"value": "x" * 9000})))
    result = await play(server, env, SEARCH, long_click, SEARCH, SEARCH)
    assert result.scored and result.protocol_errors == 0 and result.env_steps == MAX_TURNS
    feedback = last_message(server, 2)["content"]
    assert feedback.startswith("Invalid action (invalid_format): the action is 9007 characters long")


async def test_an_over_long_query_is_a_protocol_error_on_both_clients(server: ScriptedServer, env: EnvClient) -> None:
    long_query = reply(("search", json.dumps({"query": "boots " * 100})))
    result = await play(server, env, long_query, SEARCH, SEARCH, SEARCH)
    assert result.scored and result.protocol_errors == 1 and result.env_steps == MAX_TURNS - 1
    assert "the limit is 512" in last_message(server, 1)["content"]


async def test_both_clients_give_identical_feedback(server: ScriptedServer, shop: ShopSimEnv, shop_url: str) -> None:
    script = [SEARCH, reply(("click", '{"value": "nope"}')), reply(("click", json.dumps({"value": "y" * 9000}))),
              LLAMA_CPP_BAD_TOOL_CALL]
    seen = []
    for client in (InProcessEnvClient(shop), HttpEnvClient(shop_url, shards=1)):
        try:
            result = await play(server, client, *script)
        finally:
            await client.aclose()
        seen.append(([m["content"] for r in server.requests for m in r["messages"][-1:]],
                      (result.scored, result.end_reason, result.turns, result.env_steps, result.protocol_errors)))
    assert seen[0] == seen[1]


# -- transport failures stay technical -------------------------------------------------------------------


async def test_other_server_errors_stay_technical(server: ScriptedServer, env: EnvClient) -> None:
    result = await play(server, env, SEARCH, *[error(500, "CUDA error: out of memory")] * 3, max_retries=2)
    assert not result.scored and result.error["stage"] == "policy" and result.error["type"] == "ServerRefused"
    assert result.error["message"] == "the model server answered HTTP 500: CUDA error: out of memory"
    assert len(server.requests) == 4


async def test_a_trickling_server_cannot_hold_a_turn(server: ScriptedServer, env: EnvClient) -> None:
    """One byte every 2 s never trips a per-read timeout of 3 s; the whole-request timeout of 3 s does."""
    slow = Reply(200, reply(("search", '{"query": "boots"}')).body, trickle_every=2.0)
    result = await asyncio.wait_for(play(server, env, slow, timeout=3.0, max_retries=0), 60)
    assert not result.scored and result.error["stage"] == "policy" and result.error["type"] == "RequestTimeout"


async def test_retry_after_is_honoured_within_the_bounded_wait(server: ScriptedServer, env: EnvClient) -> None:
    busy = error(503, "busy", headers={"Retry-After": "0"})
    result = await play(server, env, busy, SEARCH, *[SEARCH] * 3)
    assert result.scored and len(server.requests) == MAX_TURNS + 1
    too_long = error(429, "slow down", headers={"Retry-After": "3600"})
    result = await play(server, env, too_long, SEARCH, max_retry_wait=5.0)
    assert not result.scored and result.error["type"] == "ServerRefused" and len(server.requests) == 1


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after_seconds({"retry-after": "soon"}) is None and retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "-1"}) is None


async def test_arguments_that_are_not_json_never_go_back_as_structured_tool_calls(server: ScriptedServer,
                                                                                  env: EnvClient) -> None:
    """llama.cpp refuses (HTTP 500) every request whose history holds such a call: send it back as text."""
    broken = reply(("search", '{"query": "search(['))
    result = await play(server, env, broken, SEARCH, SEARCH, SEARCH)
    assert result.scored and result.protocol_errors == 1 and result.env_steps == MAX_TURNS - 1
    for request in server.requests:
        for message in request["messages"]:
            for call in message.get("tool_calls", ()):
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
    assistant, feedback = server.requests[1]["messages"][-2:]
    assert assistant == {"role": "assistant",
                         "content": '<tool_call>\n{"name": "search", "arguments": {"query": "search([}\n</tool_call>'}
    assert feedback["role"] == "user" and "Invalid arguments for search" in feedback["content"]


async def test_a_refused_connection_stays_technical(env: EnvClient) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    p = OpenAIPolicy(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, retry_initial_delay=0.01, retry_max_delay=0.01)
    try:
        result = await run_episode(env, p, (await env.list_tasks("train"))[0], rollout_id="r", seed=0, max_turns=MAX_TURNS)
    finally:
        await p.aclose()
    assert not result.scored and result.error["stage"] == "policy" and result.error["type"] == "ServerUnreachable"
