"""The tool-call protocol: turning one model reply into one env action, or saying why not.

The rule is "exactly one tool call, no text beside it, a ShopSim tool, valid arguments".
A call the serving engine could not parse (see ``PolicyTurn.tool_call_error``), or
tool-call markup left in a reply's text, is ``invalid_arguments`` too: the model's
mistake, fed back, never resampled.  Only the *shape* of the call is checked here.  Whether the action makes sense on the
current page is the env's business: a click value that is not offered, a search on a
page without a search box or an empty query are passed through, and the env answers
with its own feedback (``unavailable_action``, ``search_unavailable``,
``empty_argument``), exactly as it would for a human typing the action.  That keeps one
place (the env) deciding what a page allows.

The checker is a pure function so the slime generate hook can reuse it on replies it
parsed itself: build a :class:`~shopsimrl.agent.policy.PolicyTurn` and call
:func:`parse_turn`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError

from shopsimrl.agent.policy import PolicyTurn

PROTOCOL_ERROR_CODES: Final = (
    "no_tool_call",  # a reply that stopped without calling a tool
    "multiple_tool_calls",  # more than one call in one reply
    "text_with_tool_call",  # non-blank text beside the call
    "unknown_tool",  # a name that is not a ShopSim tool
    "invalid_arguments",  # arguments that are not a JSON object of the right shape
)


class _SearchArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    query: StrictStr


class _ClickArguments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    value: StrictStr


# tool name -> (argument model, the argument's field name); the action is ``name[argument]``.
_TOOLS: Final[Mapping[str, tuple[type[BaseModel], str]]] = {
    "search": (_SearchArguments, "query"),
    "click": (_ClickArguments, "value"),
}
SHOPSIM_TOOL_NAMES: Final = tuple(_TOOLS)


@dataclass(frozen=True)
class ProtocolError:
    """Why a reply could not become an action; it is fed back to the model and costs a turn."""

    code: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GenerationCut:
    """The reply hit the token limit before any tool call: the episode ends as ``generation_length``."""

    message: str = "the reply was cut by the token limit before any tool call"


def offered_tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of OpenAI tool schemas (``{"type": "function", "function": {"name": ...}}``)."""
    names = []
    for tool in tools:
        function = tool.get("function", tool)
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def parse_turn(turn: PolicyTurn, offered_tools: Sequence[Mapping[str, Any]] = ()) -> str | ProtocolError | GenerationCut:
    """Return the env action string of ``turn``, or the protocol error, or a generation cut.

    ``offered_tools`` words the error messages (it lists what the page offers) and
    supplies argument limits (``maxLength``); it does not restrict the names or values
    accepted, see the module docstring.
    """
    calls = turn.tool_calls
    offered = ", ".join(offered_tool_names(offered_tools)) or "none"
    if turn.tool_call_error is not None:
        return _unparsed_call(turn.tool_call_error)
    if not calls:
        if turn.finish_reason == "length":
            return GenerationCut()
        if _has_unparsed_call(turn.text):
            return _unparsed_call("the reply holds tool-call markup that the server could not parse")
        return ProtocolError("no_tool_call", f"Your reply called no tool. Call exactly one tool ({offered}) and write no text.")
    if len(calls) > 1:
        return ProtocolError(
            "multiple_tool_calls",
            f"Your reply made {len(calls)} tool calls. Make exactly one tool call per reply.",
        )
    if turn.text is not None and turn.text.strip():
        return ProtocolError(
            "text_with_tool_call",
            "Your reply had text beside the tool call. Reply with the tool call only, no text.",
        )
    call = calls[0]
    spec = _TOOLS.get(call.name)
    if spec is None:
        return ProtocolError("unknown_tool", f"There is no tool named {call.name!r}. Available tools: {offered}.")
    model, field_name = spec
    try:
        arguments = model.model_validate_json(call.arguments or "")
    except ValidationError as exc:
        return ProtocolError(
            "invalid_arguments",
            f"Invalid arguments for {call.name}: {_summarize(exc)}. "
            f'Expected a JSON object like {{"{field_name}": "..."}}.',
        )
    value: str = getattr(arguments, field_name)
    limit = _max_length(offered_tools, call.name, field_name)
    if limit is not None and len(value) > limit:
        # The env would reject it as a bad request (a technical error); it is the model's fault.
        return ProtocolError(
            "invalid_arguments",
            f"Invalid arguments for {call.name}: {field_name} is {len(value)} characters long; the limit is {limit}.",
        )
    return f"{call.name}[{value}]"


# Tool-call markup left in the text: vLLM's and SGLang's parsers return the raw text when
# they cannot parse a call (Hermes/Qwen ``<tool_call>``, Llama-3 ``<|python_tag|>``...).
_CALL_MARKERS: Final = ("<tool_call>", "<|python_tag|>", "<function=", "[TOOL_CALLS]")


def _unparsed_call(detail: str) -> ProtocolError:
    return ProtocolError(
        "invalid_arguments",
        f"Your tool call could not be parsed ({_clip(detail)}). "
        'Call exactly one tool with a JSON object as arguments, like {"query": "..."} or {"value": "..."}.',
    )


def _has_unparsed_call(text: str | None) -> bool:
    return text is not None and any(marker in text for marker in _CALL_MARKERS)


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _max_length(tools: Sequence[Mapping[str, Any]], name: str, field_name: str) -> int | None:
    """The ``maxLength`` the offered schema of tool ``name`` sets on its argument, if any."""
    for tool in tools:
        function = tool.get("function", tool)
        if not isinstance(function, Mapping) or function.get("name") != name:
            continue
        schema = (function.get("parameters") or {}).get("properties", {}).get(field_name, {})
        limit = schema.get("maxLength") if isinstance(schema, Mapping) else None
        return limit if isinstance(limit, int) and not isinstance(limit, bool) else None
    return None


def _summarize(exc: ValidationError) -> str:
    """A one-line, model-readable version of pydantic's error list."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in error.get("loc", ())) or "arguments"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid"
