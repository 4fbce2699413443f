"""A policy backed by any OpenAI-compatible chat-completions server with tool calling.

Targets SGLang, vLLM and llama.cpp's ``llama-server`` (the rollout servers) as well as
hosted endpoints.  The conversation is the standard tool-calling one: a system prompt,
the instruction and first page as the first user message, then each later page as a
``tool`` message answering the call that produced it.  The tool list is the same on
every request of an episode (``messages.EPISODE_TOOLS``) and the history only grows at
its end, so a server's prefix cache reuses the whole previous prompt.

What a server answers is sorted three ways:

* **the model's mistakes** are scored, never technical: a tool call the server could not
  parse (SGLang's HTTP 400 "Failed to parse fc related info", llama.cpp's HTTP 500
  "Failed to parse tool call arguments as JSON"; vLLM returns the raw text, which the
  protocol checker recognises) becomes a turn with ``tool_call_error`` (an
  ``invalid_arguments`` protocol error: turn spent, model told, nothing resampled).
  llama.cpp's 500 in fact refuses a *request* whose history holds a call with arguments
  that are not JSON; so such a call is never sent back as a structured tool call, but as
  the text the model wrote (``<tool_call>`` markup), and the 500 does not recur; a conversation longer than the model's context (HTTP
  400 in the words of llama.cpp, vLLM, SGLang or OpenAI's ``context_length_exceeded``)
  becomes a length cut (``generation_length``).  ``max_context_tokens`` cuts the
  episode on the client side before the server has to refuse;
* **transient failures** (connection errors, the whole-request timeout, 429 and other
  5xx) are retried, at most ``max_retries`` times and ``max_retry_wait`` seconds of
  waiting in total per turn, honouring ``Retry-After`` on 429/503;
* **anything else** (400, 401, 404...) fails the turn at once: the episode is unscored.

Requests go over httpx (agent/chat_client.py): an answer is read up to ``max_reply_bytes`` (a longer or
endless one is a technical failure naming the cap) and typed field by field (agent/model_reply.py: the
shape is the server's, a wrong one is technical; the text is the model's, scored whatever it holds).
``timeout`` bounds the whole request, not each read: a server trickling a byte every few seconds cannot
hold a turn forever.  A reply that is no action is cut in the history sent back (``clip_reply``).

``action_format="constrained"`` (``--action-format constrained``) offers no tools: each request
carries the current page's action schema as ``response_format`` (agent/constrained.py), the reply's
JSON is the action, and a server that refuses the schema (an HTTP 4xx) fails the turn like any other
refusal: the episode is unscored (technical), with the server's message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from shopsimrl.agent.chat_client import MAX_REPLY_BYTES, ChatClient, ServerAnswer, ServerRefused, ServerUnreachable
from shopsimrl.agent.constrained import (
    DEFAULT_ACTION_FORMAT,
    ActionFormatChoice,
    check_action_format,
    schema_for,
    turn_from_reply,
)
from shopsimrl.agent.messages import EPISODE_TOOLS, first_user_message, observation_message
from shopsimrl.agent.model_reply import ModelReply, clip_reply, read_reply
from shopsimrl.agent.policy import PolicyTurn, TurnFeedback
from shopsimrl.env.types import Observation, Task
from shopsimrl.errors import InfraFailure

# Lower-cased fragments of the error a server gives when it cannot parse the model's tool call.
TOOL_CALL_PARSE_ERRORS: Final = (
    "failed to parse tool call",  # llama.cpp: "Failed to parse tool call arguments as JSON: ..."
    "failed to parse fc related info",  # SGLang's function-call parser
    "error in extracting tool call",  # vLLM tool parsers, when they raise instead of returning the text
)
# ... and the error it gives when the prompt (plus max_tokens) does not fit the context.
CONTEXT_OVERFLOW_ERRORS: Final = (
    "exceeds the available context size",  # llama.cpp (type exceed_context_size_error)
    "exceed_context_size_error",
    "maximum context length",  # vLLM and OpenAI: "This model's maximum context length is N tokens..."
    "context_length_exceeded",  # OpenAI's error code
    "longer than the model's context length",  # SGLang: "The input (N tokens) is longer than the model's..."
    "is larger than the max context size",  # llama.cpp, prompt alone too long
)


class RequestTimeout(InfraFailure):
    """No complete response arrived within the policy's ``timeout`` (the whole request)."""


@dataclass(frozen=True)
class OpenAIPolicyOptions(ActionFormatChoice):
    """Every knob of :class:`OpenAIPolicy`, with its default; the API key itself is never stored here."""

    base_url: str = "http://127.0.0.1:30000/v1"
    model: str = "default"
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable; unset -> "EMPTY"
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int = 1024  # per turn
    max_context_tokens: int | None = None  # prompt + completion budget; None: only the server's limit
    timeout: float = 120.0  # seconds for the whole request (connect, wait, every byte of the answer)
    max_retries: int = 3  # on connection errors, timeouts, 429 and 5xx only
    retry_initial_delay: float = 0.5
    retry_max_delay: float = 8.0
    max_retry_wait: float = 60.0  # seconds slept between the attempts of one turn, Retry-After included
    system_prompt: str | None = None  # None: the built-in prompt of the action format
    send_seed: bool = False  # send a request seed derived from the episode seed and the turn
    parallel_tool_calls: bool | None = False  # sent as is; None leaves the field out (servers that refuse it)
    extra_body: dict[str, Any] = field(default_factory=dict)  # e.g. {"chat_template_kwargs": {...}}
    action_format: str = DEFAULT_ACTION_FORMAT  # "tools" (tool calls) or "constrained" (a JSON schema per page)
    max_reply_bytes: int = MAX_REPLY_BYTES  # a longer answer is read no further: a technical failure

    def __post_init__(self) -> None:
        checks = {
            "temperature": self.temperature >= 0,
            "top_p": 0 < self.top_p <= 1,
            "max_tokens": self.max_tokens >= 1,
            "max_context_tokens": self.max_context_tokens is None or self.max_context_tokens > self.max_tokens,
            "timeout": self.timeout > 0,
            "max_retries": self.max_retries >= 0,
            "retry_initial_delay": self.retry_initial_delay >= 0,
            "retry_max_delay": self.retry_max_delay >= self.retry_initial_delay,
            "max_retry_wait": self.max_retry_wait >= 0,
            "max_reply_bytes": self.max_reply_bytes >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                hint = f" (it must exceed max_tokens={self.max_tokens})" if name == "max_context_tokens" else ""
                raise ValueError(f"openai policy option {name}={getattr(self, name)!r} is out of range{hint}")
        if not isinstance(self.extra_body, dict):
            raise ValueError(f"openai policy option extra_body must be a JSON object, got {self.extra_body!r}")
        check_action_format(self.action_format)


def request_seed(episode_seed: int, turn: int) -> int:
    """The sampling seed sent for ``turn`` of an episode: reproducible, different on every turn."""
    return random.Random(f"shopsimrl:{episode_seed}:{turn}").getrandbits(31)


def is_tool_call_parse_error(status: int, text: str) -> bool:
    """A server error that is the model's malformed tool call, not a failing server."""
    return status in (400, 500) and any(fragment in text.lower() for fragment in TOOL_CALL_PARSE_ERRORS)


def is_context_overflow(status: int, text: str) -> bool:
    """A refusal because the conversation no longer fits the model's context."""
    return status in (400, 413) and any(fragment in text.lower() for fragment in CONTEXT_OVERFLOW_ERRORS)


def retry_after_seconds(headers: Any, now: float | None = None) -> float | None:
    """``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``, as seconds; None if absent or bad."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        value = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, value)
    return value if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True)
class _ModelMistake:
    """A server refusal caused by the model's own output (see the module docstring)."""

    kind: str  # "tool_call" | "context"
    message: str


class OpenAIPolicy:
    """Chat-completions policy; one client per event loop, shared by all episodes on it."""

    name = "openai"

    def __init__(self, **options: Any) -> None:
        self.options = OpenAIPolicyOptions(**options)
        self._client: ChatClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._jitter = random.Random()  # jitter only spreads retries; it need not be reproducible

    def describe(self) -> dict[str, Any]:
        described = asdict(self.options)
        described.pop("system_prompt")
        return described

    def new_episode(self, task: Task, seed: int) -> _OpenAIEpisode:
        return _OpenAIEpisode(self, task, seed)

    async def aclose(self) -> None:
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.aclose()

    def client(self) -> ChatClient:
        """The client bound to the running loop (an httpx pool cannot move between loops)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            opts = self.options
            self._client = ChatClient(opts.base_url, os.environ.get(opts.api_key_env) or "EMPTY", opts.timeout,
                                      opts.max_reply_bytes)
            self._client_loop = loop
        return self._client

    def request(self, messages: list[dict[str, Any]], *, max_tokens: int, seed: int | None,
                schema: dict[str, Any] | None = None) -> dict[str, Any]:
        """The body of one chat-completions request (``extra_body`` is merged into it when sent).

        Constrained actions: no tools, and ``schema`` (the page's actions) as ``response_format``.
        """
        opts = self.options
        request: dict[str, Any] = {
            "model": opts.model,
            "messages": messages,
            "temperature": opts.temperature,
            "top_p": opts.top_p,
            "max_tokens": max_tokens,
        }
        if not opts.constrained:
            request["tools"] = EPISODE_TOOLS
            if opts.parallel_tool_calls is not None:
                request["parallel_tool_calls"] = opts.parallel_tool_calls
        elif schema is not None:
            request["response_format"] = {"type": "json_schema",
                                          "json_schema": {"name": "shopsim_action", "schema": schema, "strict": True}}
        if seed is not None:
            request["seed"] = seed
        if opts.extra_body:
            request["extra_body"] = opts.extra_body
        return request

    async def complete(self, request: dict[str, Any]) -> ModelReply | _ModelMistake:
        """One checked reply (or the model's mistake the server reported), retried on transient failures only.

        Raises (a technical failure) on a refusal, a reply of the wrong shape (``BadModelReply``) or size
        (``ReplyTooLarge``), and on transient failures once the retries are spent."""
        opts = self.options
        attempt = 0
        waited = 0.0
        while True:
            retry_after: float | None = None
            try:
                answer = await asyncio.wait_for(self.client().post(request), opts.timeout)
            except asyncio.TimeoutError:
                failure: Exception = RequestTimeout(f"no complete response within {opts.timeout:g} s")
            except ServerUnreachable as exc:
                failure = exc
            else:
                if answer.status < 300:
                    return read_reply(answer.body)
                mistake = _model_mistake(answer)
                if mistake is not None:
                    return mistake
                failure = ServerRefused(answer.status, answer.error_message())
                if answer.status != 429 and answer.status < 500:
                    raise failure
                if answer.status in (429, 503):
                    retry_after = retry_after_seconds(answer.headers)
            if attempt >= opts.max_retries:
                raise failure
            delay = min(opts.retry_initial_delay * 2**attempt, opts.retry_max_delay)
            delay = retry_after if retry_after is not None else delay * (1 - 0.25 * self._jitter.random())
            if waited + delay > opts.max_retry_wait:
                raise failure  # the server asks for a longer wait than this turn may spend
            await asyncio.sleep(delay)
            waited += delay
            attempt += 1


def _model_mistake(answer: ServerAnswer) -> _ModelMistake | None:
    text = answer.text
    if is_tool_call_parse_error(answer.status, text):
        return _ModelMistake("tool_call", answer.error_message())
    if is_context_overflow(answer.status, text):
        return _ModelMistake("context", answer.error_message())
    return None


class _OpenAIEpisode:
    """The message history of one episode."""

    def __init__(self, policy: OpenAIPolicy, task: Task, seed: int) -> None:
        self._policy = policy
        self._task = task
        self._seed = seed
        self._turn = 0
        self._messages: list[dict[str, Any]] = []
        self._unanswered: list[str] = []  # tool_call ids of the last assistant message
        # Context accounting: the server's token count of the conversation at its last answer,
        # and the characters it covered, so the next prompt's size can be estimated.
        self._known_tokens: int | None = None
        self._known_chars = 0

    async def act(self, observation: Observation, feedback: TurnFeedback | None) -> PolicyTurn:
        opts = self._policy.options
        self._append_observation(observation, feedback)
        turn, self._turn = self._turn, self._turn + 1
        max_tokens = opts.max_tokens
        estimate = self._estimated_prompt_tokens()
        if opts.max_context_tokens is not None and estimate is not None:
            room = opts.max_context_tokens - estimate
            if room < 1:  # the next prompt alone fills the budget: cut here, not at the server
                return PolicyTurn(text=None, finish_reason="length", prompt_tokens=None, completion_tokens=None)
            max_tokens = min(max_tokens, room)
        seed = request_seed(self._seed, turn) if opts.send_seed else None
        schema = schema_for(opts.action_format, observation, self._task.instruction)
        request = self._policy.request(self._messages, max_tokens=max_tokens, seed=seed, schema=schema)
        response = await self._policy.complete(request)
        if isinstance(response, _ModelMistake):
            self._unanswered = []  # the server kept the reply: the feedback goes as a user message
            if response.kind == "context":
                return PolicyTurn(text=None, finish_reason="length")
            return PolicyTurn(text=None, finish_reason="stop", tool_call_error=response.message)
        calls = tuple(dataclasses.replace(c, id=c.id or f"call_{len(self._messages)}_{i}")
                      for i, c in enumerate(response.tool_calls))
        prompt_tokens, completion_tokens = response.prompt_tokens, response.completion_tokens
        text, kept, _cut = clip_reply(response.text, calls)  # the trace records the same cut (agent/episode.py)
        if opts.constrained:
            # The reply is the action's JSON, kept as the assistant's text; the next page is a user turn.
            self._messages.append({"role": "assistant", "content": text or ""})
            self._unanswered = []
            self._count(prompt_tokens, completion_tokens)
            return turn_from_reply(response.text, response.finish_reason, prompt_tokens=prompt_tokens,
                                   completion_tokens=completion_tokens)
        if all(_json_object(c.arguments) for c in kept):
            self._messages.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    **(
                        {"tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in kept]}
                        if kept
                        else {}
                    ),
                }
            )
            self._unanswered = [c.id for c in kept if c.id is not None]
        else:
            # Arguments that are not a JSON object cannot go back as structured tool calls: the
            # server must parse them to render its template (llama.cpp answers HTTP 500 "Failed to
            # parse tool call arguments as JSON" for the whole request, on every later turn).  The
            # reply goes back as the text the model wrote, in the Hermes markup most templates use.
            written = "".join(f'<tool_call>\n{{"name": {json.dumps(c.name, ensure_ascii=False)}, "arguments": '
                              f'{c.arguments}}}\n</tool_call>' for c in kept)
            self._messages.append({"role": "assistant", "content": (text or "") + written})
            self._unanswered = []
        self._count(prompt_tokens, completion_tokens)
        return PolicyTurn(
            text=response.text,
            tool_calls=calls,
            finish_reason=response.finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    def _count(self, prompt_tokens: Any, completion_tokens: Any) -> None:
        """Remember the server's token count of the conversation so far (for the next prompt's estimate)."""
        if isinstance(prompt_tokens, int) and isinstance(completion_tokens, int):
            self._known_tokens = prompt_tokens + completion_tokens
            self._known_chars = _chars(self._messages)

    def _estimated_prompt_tokens(self) -> int | None:
        """The next prompt's tokens: the last known count plus the new characters at this conversation's ratio."""
        if self._known_tokens is None:
            return None
        ratio = self._known_tokens / max(1, self._known_chars)  # overestimates: the tools' tokens are in the count
        return self._known_tokens + math.ceil(max(0, _chars(self._messages) - self._known_chars) * ratio)

    def _append_observation(self, observation: Observation, feedback: TurnFeedback | None) -> None:
        if not self._messages:
            self._messages.append({"role": "system", "content": self._policy.options.prompt})
            self._messages.append({"role": "user", "content": first_user_message(self._task, observation)})
            return
        content = observation_message(observation, feedback)
        if self._unanswered:
            # Every call of the last assistant message gets an answer, as the API requires.
            self._messages.extend({"role": "tool", "tool_call_id": cid, "content": content} for cid in self._unanswered)
        else:
            self._messages.append({"role": "user", "content": content})
        self._unanswered = []


def _json_object(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except (ValueError, RecursionError):  # "[" * 200000 is the model's text too: not an object
        return False


def _chars(messages: list[dict[str, Any]]) -> int:
    total = 0
    for message in messages:
        total += len(message.get("content") or "") + 16  # role markers
        for call in message.get("tool_calls", ()):
            total += len(call["function"]["name"]) + len(call["function"]["arguments"]) + 16
    return total
