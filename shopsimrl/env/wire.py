"""JSON shapes of the HTTP API, shared by the server and HttpEnvClient.

One module for both directions keeps the two sides from drifting apart, and
the error table maps a JSON error code back to the very EnvError subclass the
in-process client would have raised.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from shopsimrl.env import types as t

ERROR_CLASSES: dict[str, type[t.EnvError]] = {
    cls.code: cls
    for cls in (t.UnknownTaskError, t.LeaseConflictError, t.EpisodeFinishedError, t.NoFreeSlotError,
                t.BadRequestError, t.QueryTooLongError, t.InvalidRequestError, t.EnvUnavailableError)
}

HTTP_STATUS: dict[type[t.EnvError], int] = {
    t.UnknownTaskError: 404,
    t.LeaseConflictError: 409,
    t.EpisodeFinishedError: 409,
    t.NoFreeSlotError: 503,
    t.InvalidRequestError: 422,
    t.BadRequestError: 400,
    t.EnvUnavailableError: 503,
}


def status_for(error: t.EnvError) -> int:
    for cls in type(error).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]  # type: ignore[index]
    return 500


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def error_from_body(status: int, body: Any) -> t.EnvError:
    """Rebuild the EnvError a response carries; unknown codes keep their code on a base class."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return t.EnvError(f"HTTP {status} without an error body", code=f"http_{status}")
    code = str(error.get("code", f"http_{status}"))
    message = str(error.get("message", ""))
    cls = ERROR_CLASSES.get(code)
    if cls is not None:
        return cls(message)
    base = t.BadRequestError if 400 <= status < 500 else t.EnvError
    return base(message, code=code)


def task_to_json(task: t.Task) -> dict[str, Any]:
    return asdict(task)


def task_from_json(data: dict[str, Any]) -> t.Task:
    return t.Task(task_id=data["task_id"], split=data["split"], instruction=data["instruction"], goal=data["goal"])


def observation_to_json(obs: t.Observation) -> dict[str, Any]:
    return {"text": obs.text, "state": obs.state, "tools": obs.tools}


def observation_from_json(data: dict[str, Any]) -> t.Observation:
    return t.Observation(text=data["text"], state=data["state"], tools=data["tools"])


def reset_to_json(result: t.ResetResult) -> dict[str, Any]:
    return {"lease_id": result.lease_id, "task": task_to_json(result.task),
            "observation": observation_to_json(result.observation)}


def reset_from_json(data: dict[str, Any]) -> t.ResetResult:
    return t.ResetResult(lease_id=data["lease_id"], task=task_from_json(data["task"]),
                         observation=observation_from_json(data["observation"]))


def step_to_json(result: t.StepResult) -> dict[str, Any]:
    return {"observation": observation_to_json(result.observation), "reward": result.reward,
            "terminated": result.terminated, "truncated": result.truncated, "info": result.info}


def step_from_json(data: dict[str, Any]) -> t.StepResult:
    return t.StepResult(observation=observation_from_json(data["observation"]), reward=data["reward"],
                        terminated=data["terminated"], truncated=data["truncated"], info=data["info"])
