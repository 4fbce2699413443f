"""Answers of an env server, bounded and typed: what :class:`~shopsimrl.env.http_client.HttpEnvClient` and the
env pool accept from the network.

A body is read up to ``MAX_RESPONSE_BYTES`` (an endless body stops there; a ``Content-Length`` over it
is not read at all), and each answer is checked against the shape an env server sends before any
field is used.  Anything else is a :class:`BadResponseError`: an :class:`EnvUnavailableError`, so an
episode that meets it is a technical failure of the env (unscored), and a command prints one line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import httpx

from shopsimrl.env.types import EnvUnavailableError
from shopsimrl.io import json_type, printable

MAX_RESPONSE_BYTES = 32 << 20  # far above any answer of ours (a results page is tens of KiB, a task list < 1 MiB)


class BadResponseError(EnvUnavailableError):
    """An answer no env server sends: longer than the cap, not JSON, or JSON of another shape.

    An :class:`EnvUnavailableError`, so a rollout counts it as a technical failure of the env (the
    episode is unscored, the pool checks that server's health) and a command prints it in one line."""

    code = "bad_response"


async def read_capped(client: httpx.AsyncClient, request: httpx.Request,
                      limit: int = MAX_RESPONSE_BYTES) -> tuple[int, Any]:
    """Send ``request`` and read its answer: (status, JSON body or None when it is not JSON).

    At most ``limit`` bytes are read (decoded, so a compressed bomb stops there too); a longer
    answer is a :class:`BadResponseError`.  Transport errors are httpx's, as from ``client.send``."""
    response, data = await read_capped_bytes(client, request, limit, "an env server", BadResponseError)
    return response.status_code, json_or_none(data)


async def read_capped_bytes(client: httpx.AsyncClient, request: httpx.Request, limit: int, source: str,
                            too_long: Callable[[str], Exception]) -> tuple[httpx.Response, bytes]:
    """The one bounded reader of answers from outside (env servers, model servers): send ``request``, read at
    most ``limit`` bytes of its decoded body; a longer one raises ``too_long(message)`` naming the cap and
    ``source`` (the kind of server, for the message).  The response comes back closed, its body read."""
    what = f"{request.method} {printable(request.url.path, limit=80)}"
    response = await client.send(request, stream=True)
    try:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_long(f"{what}: the answer announces {int(declared):,} bytes, more than the {limit:,} "
                           f"{source} may send")
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise too_long(f"{what}: the answer goes on past {limit:,} bytes, the most {source} may send; "
                               f"stopped reading it")
            chunks.append(chunk)
    finally:
        await response.aclose()
    return response, b"".join(chunks)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_or_none(data: bytes) -> Any:
    """Strict JSON (no NaN or Infinity, nesting within the parser's depth), or None for anything else."""
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # not JSON (nor UTF-8), NaN, or nested beyond the parser's depth
        return None


# -- the shapes of the answers ------------------------------------------------------------------------------


def _kind(value: object) -> str:
    """"a list", "an object", "null": the JSON type of ``value``, for messages."""
    kind = json_type(value)
    return kind if kind == "null" else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _expect(ok: bool, what: str, key: str, value: object, expected: str) -> None:
    if not ok:
        raise BadResponseError(f"{what}: {printable(key, limit=60)} is {_kind(value)} "
                               f"({printable(repr(value), limit=40)}), expected {expected}")


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadResponseError(f"{what}: the answer is {_kind(body)} in JSON, not an object")
    return body


def _field(body: dict[str, Any], key: str, what: str, kinds: type | tuple[type, ...], expected: str, *,
           optional: bool = False) -> Any:
    if key not in body:
        if optional:
            return None
        raise BadResponseError(f"{what}: the answer has no {key!r}")
    value = body[key]
    _expect(isinstance(value, kinds) and not (isinstance(value, bool) and bool not in _tuple(kinds)),
            what, key, value, expected)
    return value


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _count(body: dict[str, Any], key: str, what: str, *, optional: bool = False) -> int | None:
    value = _field(body, key, what, int, "a whole number >= 0", optional=optional)
    _expect(value is None or value >= 0, what, key, value, "a whole number >= 0")
    return value


def check_healthz(body: Any, what: str = "GET /healthz") -> dict[str, Any]:
    """A ``/healthz`` answer with the types its readers rely on (slot counts whole numbers >= 0, ``ready`` a
    boolean, ``fingerprint`` an object); anything else is a :class:`BadResponseError`."""
    body = _object(body, what)
    _count(body, "slots", what)
    for key in ("free_slots", "leased"):
        _count(body, key, what, optional=True)
    _field(body, "ready", what, bool, "true or false", optional=True)
    _field(body, "fingerprint", what, dict, "an object", optional=True)
    return body


def check_task(body: Any, what: str) -> dict[str, Any]:
    body = _object(body, what)
    for key in ("task_id", "split", "instruction"):
        _field(body, key, what, str, "a string")
    _field(body, "goal", what, dict, "an object")
    return body


def _check_observation(body: Any, what: str) -> None:
    body = _object(body, what)
    _field(body, "text", what, str, "a string")
    _field(body, "state", what, dict, "an object")
    _field(body, "tools", what, list, "a list")


def check_reset(body: Any, what: str) -> dict[str, Any]:
    body = _object(body, what)
    _field(body, "lease_id", what, str, "a string")
    check_task(body.get("task"), f"{what} task")
    _check_observation(body.get("observation"), f"{what} observation")
    return body


def check_step(body: Any, what: str) -> dict[str, Any]:
    body = _object(body, what)
    _check_observation(body.get("observation"), f"{what} observation")
    reward = _field(body, "reward", what, (int, float, type(None)), "a number or null")
    _expect(reward is None or math.isfinite(reward), what, "reward", reward, "a finite number")
    _field(body, "terminated", what, bool, "true or false")
    _field(body, "truncated", what, bool, "true or false")
    _field(body, "info", what, dict, "an object")
    return body


def check_task_ids(body: Any, what: str) -> list[str]:
    ids = _field(_object(body, what), "task_ids", what, list, "a list of task ids")
    for task_id in ids:
        _expect(isinstance(task_id, str), what, "task_ids", task_id, "a list of strings")
    return list(ids)
