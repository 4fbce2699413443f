"""The environment's public data types and the client interface every caller uses.

The agent and the slime generate hook talk to ShopSim only through
:class:`EnvClient`; the in-process client and the HTTP client both implement it,
so a run switches between them with one flag.  Conventions follow Gymnasium:
observations are data, ``terminated`` (the episode reached an end the task
defines: a purchase) is distinct from ``truncated`` (a limit: actions,
generation length), and ``info`` carries the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from shopsimrl.errors import InfraFailure

# Reasons a caller may give to terminate(); both are scored 0.
TERMINATE_REASONS = ("generation_length", "action_limit")

# What every client's healthz() reports (the HTTP server's /healthz adds "tasks" and "versions",
# the in-process client the same; the multi-server pool adds "servers").
HEALTHZ_KEYS = ("ready", "slots", "free_slots", "leased", "fingerprint")

# Feedback reason codes for invalid actions (the page stays unchanged, the step counts).
FEEDBACK_CODES = (
    "invalid_format",
    "empty_argument",
    "search_unavailable",
    "unavailable_action",
    "incomplete_options",
    "already_selected",
)


@dataclass(frozen=True)
class Task:
    task_id: str
    split: str  # "train" | "val" | "test"
    instruction: str  # English instruction shown to the agent
    goal: dict[str, Any]  # category, attributes, options, budget... (see env.catalog)


@dataclass(frozen=True)
class Observation:
    text: str  # deterministic text observation: what a model reads
    state: dict[str, Any]  # structured observation_state: page type, clickables, products...
    tools: list[dict[str, Any]]  # OpenAI-style tool schemas offered on this page


@dataclass(frozen=True)
class ResetResult:
    lease_id: str  # unguessable; required by step / terminate / release
    task: Task
    observation: Observation


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    reward: float | None  # final reward (= r_strict) once the episode ended, else None
    terminated: bool  # a purchase ended the episode
    truncated: bool  # a limit ended it (action_limit, generation_length)
    info: dict[str, Any] = field(default_factory=dict)
    # info keys: "feedback" (None or {"code": one of FEEDBACK_CODES, "message": str}),
    # "reward_detail" (dict, once ended), "end_reason" ("purchase" | "action_limit" |
    # "generation_length" | None), "steps" (actions taken so far)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class EnvError(InfraFailure):
    """Base of every environment error; ``code`` is the machine-readable kind."""

    code = "env_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownTaskError(EnvError):
    code = "unknown_task"


class LeaseConflictError(EnvError):
    """A stale, released or wrong lease id."""

    code = "lease_conflict"


class EpisodeFinishedError(EnvError):
    """step() on an episode that already ended."""

    code = "episode_finished"


class NoFreeSlotError(EnvError):
    """reset() waited for a free slot longer than its timeout."""

    code = "no_free_slot"


class BadRequestError(EnvError):
    code = "bad_request"


class QueryTooLongError(BadRequestError):
    """A search argument over the 512-character limit (HTTP 400)."""

    code = "query_too_long"


class InvalidRequestError(BadRequestError):
    """A malformed request body (HTTP 422)."""

    code = "invalid_request"


class EnvUnavailableError(EnvError):
    """The env server could not be reached (connection error, timeout)."""

    code = "env_unavailable"


@runtime_checkable
class EnvClient(Protocol):
    """What a caller needs from ShopSim; all methods are coroutines."""

    async def reset(self, task_id: str) -> ResetResult: ...

    async def step(self, lease_id: str, action: str) -> StepResult: ...

    async def terminate(self, lease_id: str, reason: str) -> StepResult: ...

    async def release(self, lease_id: str) -> None: ...

    async def list_tasks(self, split: str) -> list[str]: ...

    async def get_task(self, task_id: str) -> Task: ...

    async def healthz(self) -> dict[str, Any]:
        """At least :data:`HEALTHZ_KEYS`: ready, slots, free_slots, leased (episodes holding a slot), fingerprint."""
        ...

    async def aclose(self) -> None: ...


class EnvClientWrapper:
    """An :class:`EnvClient` that delegates every call to ``inner``: subclass it and override
    only what the wrapper changes (fault injection, metering...)."""

    def __init__(self, inner: EnvClient) -> None:
        self.inner = inner

    async def reset(self, task_id: str) -> ResetResult:
        return await self.inner.reset(task_id)

    async def step(self, lease_id: str, action: str) -> StepResult:
        return await self.inner.step(lease_id, action)

    async def terminate(self, lease_id: str, reason: str) -> StepResult:
        return await self.inner.terminate(lease_id, reason)

    async def release(self, lease_id: str) -> None:
        await self.inner.release(lease_id)

    async def list_tasks(self, split: str) -> list[str]:
        return await self.inner.list_tasks(split)

    async def get_task(self, task_id: str) -> Task:
        return await self.inner.get_task(task_id)

    async def healthz(self) -> dict[str, Any]:
        return await self.inner.healthz()

    async def aclose(self) -> None:
        await self.inner.aclose()
