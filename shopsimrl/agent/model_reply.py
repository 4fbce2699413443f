"""A chat-completions answer, typed: what the server sent is checked field by field before any of it is used.

The rule (docs/agent.md, "What a reply may hold"): the *shape* of an answer is the server's, the *text* in it
is the model's.

* the server's: the body (strict JSON, an object), ``choices`` (a non-empty list of objects), ``message`` (an
  object), ``content`` (a string or null), ``tool_calls`` (a list of objects or null), each call's ``id``,
  ``function`` (an object), ``name`` and ``arguments`` (strings or null), ``finish_reason`` (a string or
  null).  Anything else is a :class:`BadModelReply`: a technical failure (the episode is unscored), whose
  message says what the server sent;
* ``usage`` is the server's bookkeeping, not needed to play the turn: a count that is not a whole number in
  ``0..2**53`` (a string, NaN, a float, a negative, a boolean) is not known (None), and the turn plays on;
* every string is the model's, whatever it holds (megabytes, NUL, escape sequences, brackets nested
  200,000 deep, ``NaN`` in the arguments): the protocol check scores it.  Half a surrogate pair, which has
  no UTF-8 form, is read as U+FFFD (:func:`shopsimrl.io.well_formed`), so the text can go anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from shopsimrl.agent.policy import ToolCall
from shopsimrl.errors import InfraFailure
from shopsimrl.io import json_type, printable, well_formed

MAX_COUNT: Final = 2**53  # a token count beyond this is no count (a float would lose its digits)
# The history sent back to the server keeps at most this of a reply (agent/openai_policy.py): a valid action
# is one call of a few dozen characters, so only a reply that is no action is ever cut.
HISTORY_MAX_CALLS: Final = 8
HISTORY_MAX_CHARS: Final = 16_000


class BadModelReply(InfraFailure):
    """An answer no chat-completions server sends (the shape is wrong): a technical failure of the server."""


@dataclass(frozen=True)
class ModelReply:
    """One checked answer: the model's text and tool calls, the server's finish reason and token counts."""

    text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None


def _a(value: object) -> str:
    kind = json_type(value)
    shown = "" if value is None else f" ({printable(repr(value), limit=60)})"
    return ("null" if kind == "null" else f"an {kind}" if kind[0] in "aeiou" else f"a {kind}") + shown


def _bad(where: str, value: object, expected: str) -> BadModelReply:
    shown = where if where == "its answer" else f"`{where}`"
    return BadModelReply(f"the model server sent {shown} as {_a(value)}, expected {expected}")


def _string(holder: dict[str, Any], key: str, where: str) -> str | None:
    value = holder.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(where, value, "a string or null")
    return None if value is None else well_formed(value)


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, value, "an object")
    return value


def _count(usage: object, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def read_reply(body: Any) -> ModelReply:
    """The typed reply of a chat-completions answer's JSON (``None``: the body was not JSON); see the module doc."""
    if body is None:
        raise BadModelReply("the model server's answer is not JSON (nor UTF-8 text holding JSON without NaN or "
                            "Infinity, nested within the parser's depth)")
    body = _object(body, "its answer")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _bad("choices", choices, "a non-empty list")
    choice = _object(choices[0], "choices[0]")
    message = _object(choice.get("message"), "choices[0].message")
    text = _string(message, "content", "message.content")
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raise _bad("message.tool_calls", raw_calls, "a list or null")
    calls = []
    for index, raw in enumerate(raw_calls or ()):
        where = f"tool_calls[{index}]"
        call = _object(raw, where)
        function = _object(call.get("function"), f"{where}.function")
        name = _string(function, "name", f"{where}.function.name")
        if name is None:
            raise _bad(f"{where}.function.name", None, "a string")
        calls.append(ToolCall(name=name, arguments=_string(function, "arguments", f"{where}.function.arguments") or "",
                              id=_string(call, "id", f"{where}.id")))
    finish = _string(choice, "finish_reason", "choices[0].finish_reason")
    usage = body.get("usage")
    return ModelReply(text=text, tool_calls=tuple(calls), finish_reason=finish or "stop",
                      prompt_tokens=_count(usage, "prompt_tokens"), completion_tokens=_count(usage, "completion_tokens"))


def _clip(text: str) -> tuple[str, int]:
    """``text`` cut to :data:`HISTORY_MAX_CHARS`, and how many characters were left out."""
    if len(text) <= HISTORY_MAX_CHARS:
        return text, 0
    return text[:HISTORY_MAX_CHARS], len(text) - HISTORY_MAX_CHARS


def clip_reply(text: str | None, calls: Sequence[ToolCall]) -> tuple[str | None, tuple[ToolCall, ...], str | None]:
    """The reply as kept in the conversation and the trace: at most :data:`HISTORY_MAX_CALLS` calls and
    :data:`HISTORY_MAX_CHARS` characters a string; and a note saying what was cut (None: nothing).

    Only a reply that is no action reaches these bounds (20,000 calls, megabytes of text): sent back whole,
    it would be sent again on every later turn of the episode, each request larger than the last."""
    cut_chars = 0
    if text is not None:
        text, cut_chars = _clip(text)
    kept = []
    for call in calls[:HISTORY_MAX_CALLS]:
        arguments, cut = _clip(call.arguments)
        name, cut_name = _clip(call.name)
        cut_chars += cut + cut_name
        kept.append(call if not (cut or cut_name) else ToolCall(name=name, arguments=arguments, id=call.id))
    cut_calls = len(calls) - len(kept)
    if not cut_chars and not cut_calls:
        return text, tuple(kept), None
    parts = ([f"{cut_calls:,} of its {len(calls):,} tool calls"] if cut_calls else []) + (
        [f"{cut_chars:,} characters of its text and arguments"] if cut_chars else [])
    return text, tuple(kept), f"the reply was cut in the conversation sent back: {' and '.join(parts)} left out"
