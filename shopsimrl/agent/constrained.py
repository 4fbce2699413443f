"""Constrained actions (``--action-format constrained``): the server may only decode a valid action.

Small models rarely produce a well-formed tool call (SmolLM2-135M: none in 32 episodes), so they
never reach the env and every group has zero reward spread. Inference servers can constrain decoding
to a JSON schema (llama.cpp's ``response_format`` / ``json_schema``, SGLang's ``json_schema`` sampling
parameter, vLLM's guided decoding). With ``constrained``, each request carries the schema of the
current page's actions, built from what the env says the page accepts (:func:`page_action_schema`):

- ``{"name": "search", "arguments": {"query": "<words>"}}`` where the page has a search box (a free
  query of words, at most :data:`CONSTRAINED_QUERY_MAX_CHARS` characters);
- ``{"name": "click", "arguments": {<kind>: <one of the page's clickables of that kind>}}`` otherwise (an
  enum per kind, :data:`CLICK_KEYS`): ``product_id`` for a results page's products, ``option`` for a product
  page's values of an option not chosen yet, ``change`` for another value of an option already chosen (the
  value already selected is left out: the env refuses it as ``already_selected``), ``link`` for
  ``back to search`` / ``< prev`` / ``next >``, ``value`` for any other (``buy now``).

The key names the kind of thing clicked. With one ``value`` key for every clickable, SmolLM2-135M copied
the page's "value one of: 'back to search', ..." and clicked ``back to search`` on nearly every results
page (16 of 16 draws of one page); with ``product_id`` it copies the page's own "a product id from the
list" (15 of 16 opened a product). Likewise, with one key for every option it re-chose the option it had
just chosen (``size=0.5oz``, ``size=1.7oz``, ...) until its turns ran out; once a chosen option is a
``change``, it mostly picks the missing option and then ``buy now``. Every key maps back to
``click[value]``: the admitted replies are exactly the page's valid actions, one reply per action
(docs/real-model.md).

``constrained-words`` is the same with a narrower query: 1 to :data:`CONSTRAINED_QUERY_MAX_WORDS` words,
each a word of the task's instruction that the shop's search reads (not one of its stop words, nor a number of
the budget's price). A 135M
model's free queries are mostly not words of the shop ("search", digits, the prompt's own placeholders),
so its searches find nothing; drawn from the instruction, a query usually finds products of the task's
kind (docs/real-model.md).

The reply's JSON is the action (:func:`turn_from_reply`): it becomes the one tool call of the turn
and goes through the same protocol check as a tool call. A reply that still does not parse (the
server ignored the schema, or the reply was cut) is the model's mistake, scored as today: a length
cut ends the episode as ``generation_length``, anything else is ``invalid_arguments``.

The query's bound keeps a reply within a small token budget (a free string could otherwise run to
``max_tokens``): about 30 tokens of JSON around at most 48 characters of words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from shopsimrl.agent.messages import default_system_prompt
from shopsimrl.agent.policy import PolicyTurn, ToolCall
from shopsimrl.env.pages import BACK, ITEM, NEXT, PREV, RESULTS, click_tool, option_clickable, search_tool
from shopsimrl.env.text import query_tokens
from shopsimrl.env.types import Observation
from shopsimrl.errors import UsageError

TOOLS_FORMAT: Final = "tools"
CONSTRAINED_FORMAT: Final = "constrained"
WORDS_FORMAT: Final = "constrained-words"  # constrained, the query made of the instruction's own words
ACTION_FORMATS: Final = (TOOLS_FORMAT, CONSTRAINED_FORMAT, WORDS_FORMAT)
CONSTRAINED_FORMATS: Final = (CONSTRAINED_FORMAT, WORDS_FORMAT)
DEFAULT_ACTION_FORMAT: Final = TOOLS_FORMAT
# A search query under the schema: words (letters, digits, a little punctuation), enough for a product
# type and a few attributes. The bound keeps every reply within a small token budget: a free string lets
# a small model write digits or markup (one token a character) until max_tokens cuts the reply.
CONSTRAINED_QUERY_MAX_CHARS: Final = 48
CONSTRAINED_QUERY_PATTERN: Final = f"^[A-Za-z0-9][A-Za-z0-9 ,.'-]{{0,{CONSTRAINED_QUERY_MAX_CHARS - 1}}}$"
# constrained-words: a query of 1 to this many words, each a word of the task's instruction
CONSTRAINED_QUERY_MAX_WORDS: Final = 6
_WORD = re.compile(r"[a-z0-9]+")
# The argument key of a click, by the kind of clickable: a results page's product, a product page's option (one
# not chosen yet, or a change of one chosen), a navigation link, or any other value (buy now). Each maps back to
# click[value] (:func:`turn_from_reply`).
PRODUCT_KEY: Final = "product_id"
OPTION_KEY: Final = "option"
CHANGE_KEY: Final = "change"  # an option of an axis already chosen: changes the choice
LINK_KEY: Final = "link"
VALUE_KEY: Final = "value"
CLICK_KEYS: Final = (PRODUCT_KEY, OPTION_KEY, CHANGE_KEY, LINK_KEY, VALUE_KEY)


class UnknownActionFormat(UsageError):
    """An action format other than :data:`ACTION_FORMATS`."""


def check_action_format(value: str) -> str:
    if value not in ACTION_FORMATS:
        raise UnknownActionFormat(f"unknown action format {value!r}: use one of {', '.join(ACTION_FORMATS)}")
    return value


def instruction_words(instruction: str) -> list[str]:
    """The distinct words of an instruction the shop's search reads, in order of appearance: the search's own
    tokens of it (:func:`~shopsimrl.env.text.query_tokens`: the env's stop words and money such as ``$20-30`` or
    ``65.00 dollars`` left out, prices being no searchable text) made of letters and digits only.

    A query of stop words alone ("in", "please", "get": SmolLM2 drew them) or of a budget's amount ("20", "120",
    "65": 13 of 61 episodes on tasks without options) finds nothing, and the results page then offers only
    ``back to search``.
    """
    return [word for word in query_tokens(instruction, max_tokens=len(instruction)) if _WORD.fullmatch(word)]


def words_query_pattern(words: Sequence[str]) -> str:
    """A query of 1..:data:`CONSTRAINED_QUERY_MAX_WORDS` words, each one of ``words`` (letters and digits only)."""
    word = "(" + "|".join(w for w in words if _WORD.fullmatch(w)) + ")"
    return f"^{word}( {word}){{0,{CONSTRAINED_QUERY_MAX_WORDS - 1}}}$"


def page_tools(observation: Observation) -> list[dict[str, Any]]:
    """The tools this page accepts, from the env's observation state (``search_available``, ``clickables``).

    Not ``observation.tools``: the episode loop offers the same fixed tool list on every page (a stable
    prompt for the prefix cache), while the schema must follow the page.
    """
    state = observation.state
    tools = [search_tool()] if state.get("search_available") else []
    clicks = state.get("clickables")
    selected = state.get("selected_options")
    chosen = {option_clickable(str(a), str(v)) for a, v in selected.items()} if isinstance(selected, dict) else set()
    if isinstance(clicks, list):
        values = [str(value) for value in clicks if str(value) not in chosen]  # already selected: refused by the env
        if values:
            tools.append(click_tool(values))
    return tools


def page_action_schema(observation: Observation, query_words: Sequence[str] | None = None) -> dict[str, Any] | None:
    """The schema of the actions valid on this page (see :func:`action_schema`)."""
    selected = observation.state.get("selected_options")
    return action_schema(page_tools(observation), query_words, page=observation.state.get("page"),
                         chosen_axes=[str(axis) for axis in selected] if isinstance(selected, dict) else ())


def click_key(value: str, page: object = None, chosen_axes: Collection[str] = ()) -> str:
    """The argument key a click of ``value`` is written with (:data:`CLICK_KEYS`)."""
    if value in (BACK, PREV, NEXT):
        return LINK_KEY
    if page == RESULTS:
        return PRODUCT_KEY
    if page == ITEM and "=" in value:
        return CHANGE_KEY if value.partition("=")[0] in chosen_axes else OPTION_KEY
    return VALUE_KEY


def schema_for(action_format: str, observation: Observation, instruction: str) -> dict[str, Any] | None:
    """The schema a request of ``action_format`` carries on this page (``None`` for tool calls)."""
    if action_format not in CONSTRAINED_FORMATS:
        return None
    return page_action_schema(observation, instruction_words(instruction) if action_format == WORDS_FORMAT else None)


def action_schema(tools: Sequence[Mapping[str, Any]], query_words: Sequence[str] | None = None, *,
                  page: object = None, chosen_axes: Collection[str] = ()) -> dict[str, Any] | None:
    """The JSON schema admitting exactly the actions of a page, from the tools it offers.

    One object schema per tool (``name`` a constant, ``arguments`` the tool's parameters with no
    extra keys; a free string becomes a query of words, :data:`CONSTRAINED_QUERY_PATTERN`); a click
    with an enum becomes one object schema per kind of clickable (:func:`click_key`), its
    argument named after the kind. Joined with ``anyOf`` when there is more than one. ``None`` when
    the page offers no tool.
    """
    variants = []
    for tool in tools:
        function = tool.get("function", tool)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters") or {}
        arguments = parameters.get("properties") or {}
        enum = (arguments.get("value") or {}).get("enum") if function["name"] == "click" else None
        if isinstance(enum, list) and list(arguments) == ["value"]:
            kinds: dict[str, list[str]] = {}
            for value in enum:
                kinds.setdefault(click_key(str(value), page, chosen_axes), []).append(str(value))
            variants += [_variant("click", {key: {"type": "string", "enum": values}}) for key, values in kinds.items()]
            continue
        variants.append(_variant(function["name"], {key: _argument_schema(value, query_words) for key, value in arguments.items()}))
    if not variants:
        return None
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _variant(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"const": name},
            "arguments": {"type": "object", "properties": properties, "required": list(properties),
                          "additionalProperties": False},
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _argument_schema(schema: Any, query_words: Sequence[str] | None) -> dict[str, Any]:
    if not isinstance(schema, Mapping) or schema.get("type") != "string":
        return dict(schema) if isinstance(schema, Mapping) else {}
    if "enum" in schema:
        return {"type": "string", "enum": list(schema["enum"])}
    if query_words:
        return {"type": "string", "pattern": words_query_pattern(query_words)}
    # the pattern bounds the length too (servers that compile a pattern may ignore min/maxLength)
    return {"type": "string", "minLength": 1, "maxLength": CONSTRAINED_QUERY_MAX_CHARS,
            "pattern": CONSTRAINED_QUERY_PATTERN}


def turn_from_reply(text: str | None, finish_reason: str, *, prompt_tokens: int | None = None,
                    completion_tokens: int | None = None) -> PolicyTurn:
    """The turn a constrained reply stands for: its JSON as the one tool call, or the model's mistake."""
    counts = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    raw = (text or "").strip()
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[" * 200000, the model's text all the same
        if finish_reason == "length":  # cut before the action closed: the episode ends as generation_length
            return PolicyTurn(text=text, finish_reason="length", **counts)
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return PolicyTurn(text=text, finish_reason=finish_reason, tool_call_error=f"the reply is not a JSON action: {why}",
                          **counts)
    name = payload.get("name") if isinstance(payload, dict) else None
    arguments = payload.get("arguments") if isinstance(payload, dict) else None
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return PolicyTurn(text=text, finish_reason=finish_reason,
                          tool_call_error='the reply is not an action of the form {"name": ..., "arguments": {...}}',
                          **counts)
    if name == "click" and len(arguments) == 1 and next(iter(arguments)) in CLICK_KEYS:
        arguments = {"value": next(iter(arguments.values()))}  # every kind's key is the click's value
    try:  # NaN, Infinity and depth the encoder refuses are the model's: the checker sees them as invalid JSON
        written = json.dumps(arguments, ensure_ascii=False)
    except (ValueError, RecursionError):
        written = raw
    call = ToolCall(name=name, arguments=written, id=None)
    return PolicyTurn(text=None, tool_calls=(call,), finish_reason=finish_reason, **counts)


class ActionFormatChoice:
    """What options holding an ``action_format`` and an optional ``system_prompt`` answer (the OpenAI policy's
    and the slime hook's settings, both frozen dataclasses): whether decoding is constrained, the prompt sent."""

    action_format: str
    system_prompt: str | None

    @property
    def constrained(self) -> bool:
        return self.action_format in CONSTRAINED_FORMATS

    @property
    def prompt(self) -> str:
        """The system prompt sent: the one given, else the built-in one of the action format."""
        return self.system_prompt if self.system_prompt is not None else default_system_prompt(self.action_format)
