"""A policy backed by any OpenAI-compatible chat-completions server with tool calling.

Targets SGLang and vLLM (the rollout servers) as well as hosted endpoints.  The
conversation is the standard tool-calling one: a system prompt, the instruction and
first page as the first user message, then each later page as a ``tool`` message
answering the call that produced it.  Protocol errors are sent back too, so the
model sees why a turn was wasted.

Retries are ours, not the client's: the client runs with ``max_retries=0`` because
its built-in policy also retries 408 and 409 and honours ``x-should-retry``; here
exactly connection errors (timeouts included), 429 and 5xx are retried, with
bounded exponential backoff and jitter.  Anything else (a 400, a 401...) fails the
turn at once, making the episode unscored.

``openai`` is imported lazily, on the first request, so importing the agent package
stays cheap.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from shopsimrl.agent.messages import DEFAULT_SYSTEM_PROMPT, first_user_message, observation_message
from shopsimrl.agent.policy import PolicyTurn, ToolCall, TurnFeedback
from shopsimrl.env.types import Observation, Task

if TYPE_CHECKING:
    from openai import AsyncOpenAI

@dataclass(frozen=True)
class OpenAIPolicyOptions:
    """Every knob of :class:`OpenAIPolicy`, with its default; the API key itself is never stored here."""

    base_url: str = "http://127.0.0.1:30000/v1"
    model: str = "default"
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable; unset -> "EMPTY"
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int = 1024  # per turn
    timeout: float = 120.0  # seconds per request
    max_retries: int = 3  # on connection errors / 429 / 5xx only
    retry_initial_delay: float = 0.5
    retry_max_delay: float = 8.0
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    send_seed: bool = False  # pass the episode seed as the request's `seed`
    extra_body: dict[str, Any] = field(default_factory=dict)  # e.g. {"chat_template_kwargs": {...}}

    def __post_init__(self) -> None:
        checks = {
            "temperature": self.temperature >= 0,
            "top_p": 0 < self.top_p <= 1,
            "max_tokens": self.max_tokens >= 1,
            "timeout": self.timeout > 0,
            "max_retries": self.max_retries >= 0,
            "retry_initial_delay": self.retry_initial_delay >= 0,
            "retry_max_delay": self.retry_max_delay >= self.retry_initial_delay,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"openai policy option {name}={getattr(self, name)!r} is out of range")


class OpenAIPolicy:
    """Chat-completions policy; one client per event loop, shared by all episodes on it."""

    name = "openai"

    def __init__(self, **options: Any) -> None:
        self.options = OpenAIPolicyOptions(**options)
        self._client: AsyncOpenAI | None = None
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
            await client.close()

    def client(self) -> AsyncOpenAI:
        """The client bound to the running loop (an httpx pool cannot move between loops)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            from openai import AsyncOpenAI

            opts = self.options
            self._client = AsyncOpenAI(
                base_url=opts.base_url,
                api_key=os.environ.get(opts.api_key_env) or "EMPTY",
                timeout=opts.timeout,
                max_retries=0,
            )
            self._client_loop = loop
        return self._client

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> Any:
        """One chat completion, retried on transient failures only."""
        import openai

        opts = self.options
        request: dict[str, Any] = {
            "model": opts.model,
            "messages": messages,
            "temperature": opts.temperature,
            "top_p": opts.top_p,
            "max_tokens": opts.max_tokens,
        }
        if tools:
            request["tools"] = tools
        if opts.send_seed:
            request["seed"] = seed
        if opts.extra_body:
            request["extra_body"] = opts.extra_body
        attempt = 0
        while True:
            try:
                return await self.client().chat.completions.create(**request)
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError):
                if attempt >= opts.max_retries:
                    raise
            delay = min(opts.retry_initial_delay * 2**attempt, opts.retry_max_delay)
            await asyncio.sleep(delay * (1 - 0.25 * self._jitter.random()))
            attempt += 1


class _OpenAIEpisode:
    """The message history of one episode."""

    def __init__(self, policy: OpenAIPolicy, task: Task, seed: int) -> None:
        self._policy = policy
        self._task = task
        self._seed = seed
        self._messages: list[dict[str, Any]] = []
        self._unanswered: list[str] = []  # tool_call ids of the last assistant message

    async def act(self, observation: Observation, feedback: TurnFeedback | None) -> PolicyTurn:
        self._append_observation(observation, feedback)
        response = await self._policy.complete(self._messages, observation.tools, self._seed)
        choice = response.choices[0]
        message = choice.message
        calls = tuple(
            ToolCall(
                name=call.function.name,
                arguments=call.function.arguments or "",
                id=call.id or f"call_{len(self._messages)}_{index}",
            )
            for index, call in enumerate(message.tool_calls or ())
        )
        self._messages.append(
            {
                "role": "assistant",
                "content": message.content or None,
                **(
                    {"tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}
                    if calls
                    else {}
                ),
            }
        )
        self._unanswered = [c.id for c in calls if c.id is not None]
        usage = getattr(response, "usage", None)
        return PolicyTurn(
            text=message.content,
            tool_calls=calls,
            finish_reason=choice.finish_reason or "stop",
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
        )

    def _append_observation(self, observation: Observation, feedback: TurnFeedback | None) -> None:
        if not self._messages:
            self._messages.append({"role": "system", "content": self._policy.options.system_prompt})
            self._messages.append({"role": "user", "content": first_user_message(self._task, observation)})
            return
        content = observation_message(observation, feedback)
        if self._unanswered:
            # Every call of the last assistant message gets an answer, as the API requires.
            self._messages.extend({"role": "tool", "tool_call_id": cid, "content": content} for cid in self._unanswered)
        else:
            self._messages.append({"role": "user", "content": content})
        self._unanswered = []
