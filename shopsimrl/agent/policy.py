"""The policy interface: what the episode loop needs from any agent, model or not.

A :class:`Policy` is long-lived (it may own an HTTP client); each episode gets its
own :class:`PolicyEpisode`, which keeps the conversation state of that episode
only, so sibling episodes never share mutable state.  Every turn is returned as
a :class:`PolicyTurn` shaped like a chat-completions reply (text, tool calls with
raw JSON arguments, finish reason), so the loop checks the heuristic and a real
model with the same protocol rules.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from shopsimrl.env.types import Observation, Task


@dataclass(frozen=True)
class ToolCall:
    """One tool call as a model emitted it; ``arguments`` is the raw JSON text, unparsed."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True)
class PolicyTurn:
    """One model reply; token counts are None when the policy does not know them.

    ``tool_call_error`` is set when the model did try a tool call but the serving engine
    could not parse it (llama.cpp answers HTTP 500 "Failed to parse tool call arguments as
    JSON"; vLLM and SGLang hand back the raw text).  That is the model's mistake: the
    protocol checker makes it an ``invalid_arguments`` error, the turn is spent and the
    model is told, never silently resampled.
    """

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_call_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TurnFeedback:
    """What went wrong with the previous turn, told to the policy before it acts again.

    ``source`` is ``"env"`` (the env refused the action: ``code`` is one of the env's
    feedback codes) or ``"protocol"`` (the reply broke the tool-call protocol: ``code``
    is a :data:`shopsimrl.agent.protocol.PROTOCOL_ERROR_CODES` value).
    """

    source: Literal["env", "protocol"]
    code: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class PolicyEpisode(Protocol):
    """The per-episode side of a policy."""

    async def act(self, observation: Observation, feedback: TurnFeedback | None) -> PolicyTurn:
        """Return the next reply given the current page and what went wrong with the last turn.

        The first call gets the reset observation and ``feedback=None``.  After a protocol
        error the observation is the unchanged page and ``feedback`` explains the error.
        """
        ...


@runtime_checkable
class Policy(Protocol):
    """A factory of episodes; ``name`` goes into traces and results."""

    name: str

    def new_episode(self, task: Task, seed: int) -> PolicyEpisode: ...

    def describe(self) -> dict[str, Any]:
        """The options that shape behaviour, recorded in every trace (never secrets)."""
        ...

    async def aclose(self) -> None: ...
