"""The tool-call protocol checker, as a pure function."""

from __future__ import annotations

import pytest
from agent.fakes import observation

from shopsimrl.agent import PROTOCOL_ERROR_CODES, GenerationCut, PolicyTurn, ProtocolError, ToolCall, parse_turn
from shopsimrl.agent.protocol import offered_tool_names


def turn(*calls: tuple[str, str], text: str | None = None, finish: str = "tool_calls") -> PolicyTurn:
    return PolicyTurn(text=text, tool_calls=tuple(ToolCall(n, a, f"id{i}") for i, (n, a) in enumerate(calls)),
                      finish_reason=finish)


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        (turn(("search", '{"query": "red boots"}')), "search[red boots]"),
        (turn(("click", '{"value": "size=9"}')), "click[size=9]"),
        (turn(("click", '{"value": "not offered anywhere"}')), "click[not offered anywhere]"),
        (turn(("search", '{"query": ""}')), "search[]"),  # the env answers empty_argument
        (turn(("search", '{"query": "boots"}'), text="  \n"), "search[boots]"),  # blank text is no text
        (turn(("click", '{"value": "buy now"}'), finish="length"), "click[buy now]"),
        (turn(("search", ' {"query": "caf\\u00e9"} ')), "search[café]"),
    ],
)
def test_well_formed_calls_become_actions(reply: PolicyTurn, action: str) -> None:
    assert parse_turn(reply, observation("results").tools) == action


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (PolicyTurn(text="hello"), "no_tool_call"),
        (PolicyTurn(text=None, finish_reason="tool_calls"), "no_tool_call"),
        (turn(("search", '{"query": "a"}'), ("click", '{"value": "p1"}')), "multiple_tool_calls"),
        (turn(("search", '{"query": "a"}'), text="searching"), "text_with_tool_call"),
        (turn(("purchase", '{"value": "p1"}')), "unknown_tool"),
        (turn(("search", "not json")), "invalid_arguments"),
        (turn(("search", "")), "invalid_arguments"),
        (turn(("search", '["boots"]')), "invalid_arguments"),
        (turn(("search", '{"q": "boots"}')), "invalid_arguments"),
        (turn(("search", '{"query": null}')), "invalid_arguments"),
        (turn(("click", '{"value": 3}')), "invalid_arguments"),
        (turn(("click", '{"value": "p1", "why": "cheap"}')), "invalid_arguments"),
    ],
)
def test_malformed_replies_are_protocol_errors(reply: PolicyTurn, code: str) -> None:
    result = parse_turn(reply, observation("results").tools)
    assert isinstance(result, ProtocolError) and result.code == code and code in PROTOCOL_ERROR_CODES
    assert result.message and result.as_dict() == {"code": code, "message": result.message}


def test_unknown_tool_message_lists_what_the_page_offers() -> None:
    result = parse_turn(turn(("buy", "{}")), observation("search").tools)
    assert isinstance(result, ProtocolError) and "search" in result.message and "buy" in result.message


def test_a_length_cut_without_a_call_is_a_generation_cut() -> None:
    assert isinstance(parse_turn(PolicyTurn(text="I will now", finish_reason="length")), GenerationCut)
    assert isinstance(parse_turn(PolicyTurn(text=None, finish_reason="length")), GenerationCut)


def test_offered_tool_names() -> None:
    assert offered_tool_names(observation("search").tools) == ["search"]
    assert offered_tool_names(observation("item").tools) == ["click"]
    assert offered_tool_names([{"name": "bare"}, {"function": "junk"}]) == ["bare"]
