"""Constrained actions: the page's action schema, a reply's JSON as the action, and the openai policy's requests.

The schema is checked with a JSON-schema validator (``jsonschema``, installed with the ``ray`` extra every
``make`` target installs): it must admit every valid action of the page and nothing else. The policy runs
through the real policy (httpx) against the scripted server on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from agent.fakes import TASK, FakeEnv, observation
from agent.openai_fake import Reply, ScriptedServer, error, scripted_server
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.agent import make_policy, run_episode
from shopsimrl.agent.constrained import (
    ACTION_FORMATS,
    CLICK_KEYS,
    CONSTRAINED_QUERY_MAX_CHARS,
    UnknownActionFormat,
    action_schema,
    check_action_format,
    click_key,
    page_action_schema,
    turn_from_reply,
)
from shopsimrl.agent.messages import CONSTRAINED_SYSTEM_PROMPT
from shopsimrl.agent.protocol import GenerationCut, ProtocolError, parse_turn
from shopsimrl.env.pages import click_tool, search_tool
from shopsimrl.env.search import MAX_QUERY_CHARS


def admits(schema: dict[str, Any], value: Any) -> bool:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def test_the_search_page_admits_a_search_with_a_bounded_free_query_only() -> None:
    schema = action_schema([search_tool()])
    assert schema is not None
    assert admits(schema, {"name": "search", "arguments": {"query": "red hiking boots"}})
    assert admits(schema, {"name": "search", "arguments": {"query": "x" * CONSTRAINED_QUERY_MAX_CHARS}})
    assert CONSTRAINED_QUERY_MAX_CHARS < MAX_QUERY_CHARS  # the env's own limit is never reached
    for wrong in ({"name": "search", "arguments": {"query": ""}},
                  {"name": "search", "arguments": {"query": "x" * (CONSTRAINED_QUERY_MAX_CHARS + 1)}},
                  {"name": "click", "arguments": {"value": "p1"}},
                  {"name": "search", "arguments": {"query": "boots", "page": 2}},
                  {"name": "search", "arguments": {}},
                  {"name": "search"},
                  {"name": "search", "arguments": {"query": "boots"}, "note": "x"}):
        assert not admits(schema, wrong), wrong


@settings(deadline=None, max_examples=50)  # a loaded shared machine: no per-example deadline
@given(clicks=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8, unique=True), other=st.text(max_size=12),
       page=st.sampled_from([None, "results", "item"]))
def test_a_click_page_admits_exactly_its_clickables_each_under_its_kinds_key(clicks: list[str], other: str,
                                                                            page: str | None) -> None:
    schema = action_schema([click_tool(clicks)], page=page)
    assert schema is not None
    for value in clicks:  # one reply per action: the value under its kind's key, under no other key
        assert [key for key in CLICK_KEYS if admits(schema, {"name": "click", "arguments": {key: value}})] == [
            click_key(value, page)]
    assert admits(schema, {"name": "click", "arguments": {click_key(other, page): other}}) == (other in clicks)
    assert not admits(schema, {"name": "search", "arguments": {"query": clicks[0]}})
    assert not admits(schema, {"name": "click", "arguments": {}})


def test_each_kind_of_clickable_has_its_own_key() -> None:
    assert [click_key(v, "results") for v in ("back to search", "< prev", "next >", "B0ABC12345")] == [
        "link", "link", "link", "product_id"]
    assert [click_key(v, "item") for v in ("back to search", "< prev", "size=9", "buy now")] == [
        "link", "link", "option", "value"]
    schema = page_action_schema(observation("results"))
    assert schema is not None
    assert [v["properties"]["arguments"]["properties"] for v in schema["anyOf"]] == [
        {"link": {"type": "string", "enum": ["back to search"]}}, {"product_id": {"type": "string", "enum": ["p1", "p2"]}}]
    assert admits(schema, {"name": "click", "arguments": {"product_id": "p1"}})
    assert not admits(schema, {"name": "click", "arguments": {"value": "p1"}})
    assert not admits(schema, {"name": "click", "arguments": {"product_id": "p1", "link": "back to search"}})


def test_an_option_already_selected_is_not_admitted_and_another_value_of_its_axis_is_a_change() -> None:
    page = observation("item")
    page = dataclasses.replace(page, state={**page.state, "selected_options": {"size": "9"}})
    schema = page_action_schema(page)
    assert schema is not None
    for key in CLICK_KEYS:  # the env refuses it as already_selected
        assert not admits(schema, {"name": "click", "arguments": {key: "size=9"}})
    for key, value in (("change", "size=10"), ("value", "buy now"), ("link", "back to search"), ("link", "< prev")):
        assert admits(schema, {"name": "click", "arguments": {key: value}}), value
    assert not admits(schema, {"name": "click", "arguments": {"option": "size=10"}})
    assert click_key("size=10", "item", ["size"]) == "change" and click_key("color=red", "item", ["size"]) == "option"


def test_a_page_with_two_tools_admits_either_and_a_page_without_tools_has_no_schema() -> None:
    schema = action_schema([search_tool(), click_tool(["back to search"])])
    assert schema is not None and len(schema["anyOf"]) == 2
    assert admits(schema, {"name": "search", "arguments": {"query": "boots"}})
    assert admits(schema, {"name": "click", "arguments": {"link": "back to search"}})
    assert not admits(schema, {"name": "click", "arguments": {"link": "p9"}})
    assert not admits(schema, {"name": "click", "arguments": {"value": "p9"}})
    assert action_schema([]) is None


def test_the_reply_json_is_the_action() -> None:
    turn = turn_from_reply('{"name": "click", "arguments": {"option": "size=9"}}', "stop", completion_tokens=12)
    assert parse_turn(turn) == "click[size=9]" and turn.completion_tokens == 12
    assert parse_turn(turn_from_reply(' {"name":"search","arguments":{"query":"red boots"}}\n', "stop")) == "search[red boots]"
    for key in CLICK_KEYS:  # every kind's key is the click's value
        assert parse_turn(turn_from_reply(json.dumps({"name": "click", "arguments": {key: "p1"}}), "stop")) == "click[p1]"


@pytest.mark.parametrize("text", ['{"name": "click", "arguments": {"value": "p1"', "I will click p1.", "", None])
def test_a_reply_that_does_not_parse_is_the_models_mistake(text: str | None) -> None:
    outcome = parse_turn(turn_from_reply(text, "stop"))
    assert isinstance(outcome, ProtocolError) and outcome.code == "invalid_arguments"


def test_a_reply_of_the_wrong_shape_is_the_models_mistake() -> None:
    for text in ('["click", "p1"]', '{"name": "click", "arguments": "p1"}', '{"action": "click[p1]"}',
                 '{"name": "click", "arguments": {"product_id": "p1", "link": "back to search"}}'):
        outcome = parse_turn(turn_from_reply(text, "stop"))
        assert isinstance(outcome, ProtocolError) and outcome.code == "invalid_arguments", text


def test_a_reply_cut_before_the_action_closed_is_a_generation_cut() -> None:
    assert isinstance(parse_turn(turn_from_reply('{"name": "search", "arguments": {"query": "red hik', "length")),
                      GenerationCut)


def test_an_unknown_action_format_is_refused_with_the_choices() -> None:
    assert [check_action_format(name) for name in ACTION_FORMATS] == list(ACTION_FORMATS)
    with pytest.raises(UnknownActionFormat, match="unknown action format 'json': use one of tools, constrained, constrained-words"):
        check_action_format("json")
    with pytest.raises(ValueError, match="unknown action format"):
        make_policy("openai", action_format="json")


# -- the openai policy with constrained actions, over real HTTP ---------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with scripted_server() as scripted:
        yield scripted


def content(text: str, finish: str = "stop") -> Reply:
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}
    return Reply(200, body)


def action(name: str, key: str, value: str) -> Reply:
    return content(json.dumps({"name": name, "arguments": {key: value}}))


async def play(server: ScriptedServer, env: FakeEnv, **options: Any) -> Any:
    policy = make_policy("openai", base_url=server.base_url, model="m", timeout=10.0, retry_initial_delay=0.01,
                         retry_max_delay=0.02, action_format="constrained", **options)
    try:
        return await run_episode(env, policy, TASK.task_id, rollout_id="r", seed=5)
    finally:
        await policy.aclose()


async def test_each_request_carries_the_schema_of_the_page_and_no_tools(server: ScriptedServer) -> None:
    server.load(action("search", "query", "red hiking boots"), action("click", "product_id", "p1"),
                action("click", "option", "size=9"), action("click", "value", "buy now"))
    result = await play(server, FakeEnv())
    assert result.scored and result.reward == 1.0 and result.turns == 4
    schemas = [r["response_format"]["json_schema"]["schema"] for r in server.requests]
    assert all(r["response_format"]["type"] == "json_schema" for r in server.requests)
    assert schemas[0] == action_schema(observation("search").tools) == page_action_schema(observation("search"))
    assert schemas[1] == page_action_schema(observation("results"))
    assert [v["properties"]["arguments"]["properties"] for v in schemas[3]["anyOf"]] == [
        {"link": {"type": "string", "enum": ["back to search", "< prev"]}},
        {"option": {"type": "string", "enum": ["size=9", "size=10"]}},
        {"value": {"type": "string", "enum": ["buy now"]}}]
    assert all("tools" not in r and "parallel_tool_calls" not in r for r in server.requests)
    first, last = server.requests[0]["messages"], server.requests[-1]["messages"]
    assert first[0] == {"role": "system", "content": CONSTRAINED_SYSTEM_PROMPT}
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "user"] * 3  # the reply is text, not a call
    assert last[2] == {"role": "assistant", "content": '{"name": "search", "arguments": {"query": "red hiking boots"}}'}
    for earlier, later in zip(server.requests, server.requests[1:]):  # the conversation only grows at its end
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"]


async def test_a_reply_that_ignores_the_schema_is_scored_as_the_models_mistake(server: ScriptedServer) -> None:
    server.load(content("Let me search for boots."), content('{"name": "search", "arguments": {"query": "bo', "length"))
    result = await play(server, FakeEnv(), max_tokens=16)
    assert result.scored and result.reward == 0.0
    assert result.end_reason == "generation_length"
    assert server.requests[1]["messages"][-1]["content"].startswith("Error: Your tool call could not be parsed")


async def test_a_server_that_refuses_the_schema_makes_the_episode_technical(server: ScriptedServer) -> None:
    server.load(error(400, "response_format: json_schema is not supported by this server"))
    result = await play(server, FakeEnv())
    assert not result.scored
    assert "json_schema is not supported" in json.dumps(result.error)
    assert len(server.requests) == 1  # a refusal is not retried


def test_constrained_words_admits_queries_of_the_instructions_words_only() -> None:
    from shopsimrl.agent.constrained import CONSTRAINED_QUERY_MAX_WORDS, instruction_words, schema_for

    page = observation("search")
    # "i", "need", "under": the env's stop words, which its search drops; "80 dollars": a price, which it does not index
    assert instruction_words(TASK.instruction) == ["red", "hiking", "boots", "size", "9"]
    schema = schema_for("constrained-words", page, TASK.instruction)
    assert schema is not None
    for query in ("red hiking boots", "boots", "size 9 red", " ".join(["red"] * CONSTRAINED_QUERY_MAX_WORDS)):
        assert admits(schema, {"name": "search", "arguments": {"query": query}}), query
    for query in ("blue boots", "red  boots", "red hiking boots!", "", " ".join(["red"] * (CONSTRAINED_QUERY_MAX_WORDS + 1))):
        assert not admits(schema, {"name": "search", "arguments": {"query": query}}), query
    assert schema_for("constrained", page, TASK.instruction) == page_action_schema(page)
    assert schema_for("tools", page, TASK.instruction) is None


@pytest.mark.parametrize("budget", ["under $35", "less than $35", "and price lower than 35.00 dollars",
                                    "for no more than $35", "around $35", "for about $35", "roughly $35.50", "$20-35",
                                    "$20.50-$35.50", "between $20 and $35", "in the $20 to $35 range"])
def test_constrained_words_leaves_the_budgets_numbers_out_of_queries(budget: str) -> None:
    """Every budget phrase the env's tasks use: a query of its numbers alone would find nothing (prices are not
    searched); the other numbers of the instruction (a size, "spf 30", "ages 3+") stay."""
    from shopsimrl.agent.constrained import instruction_words

    assert instruction_words(f"Find me spf 30 sun cream, size 2oz, ages 3+, {budget}.") == [
        "spf", "30", "sun", "cream", "size", "2oz", "ages", "3"]
