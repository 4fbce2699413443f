"""HttpEnvClient: the EnvClient interface over the env server's HTTP API.

Connections.  Idle connections are kept ``KEEPALIVE_EXPIRY`` (30 s), well below
the server's keep-alive (75 s, ``shopsimrl.defaults.KEEP_ALIVE``): a
connection the server may be about to close is never reused, so a policy that
thinks for seconds between steps does not send into a closing socket.

Retries (all in :meth:`HttpEnvClient._request`), exactly where a retry cannot
apply anything twice:

* the request never left (connect error, connect or pool timeout): every call;
* the connection broke before any reply (``RemoteProtocolError``, ``ReadError``,
  ``WriteError``): GETs (idempotent); ``/step`` and ``/terminate``, which carry a
  ``request_id`` the server answers a second time from memory instead of
  applying the action again; ``/release`` (a repeat after success is a 409,
  read as "already gone"); ``/reset``, because the server drops a reset whose
  connection closed before its reply (it never keeps the slot);
* a timeout: only ``/release``, which also retries 5xx replies, until it succeeds,
  the server says the lease is gone, or ``release_deadline`` passes.  A release
  whose connection is refused (after the connect retries) stops at once: nothing
  listens there, and a server's leases live only in its process.

Error responses are turned back into the same EnvError subclasses the
in-process client raises.

Answers are bounded and typed: a body is read up to ``MAX_RESPONSE_BYTES`` (an
endless body stops there), and every answer is checked against the shape an env
server sends before it is used (``env/answers.py``).  Anything else is a :class:`BadResponseError`: a
technical failure of the env (the episode is unscored), one line for a command.

Requests are spread over several small httpx clients ("shards", a lease always
on the same one): one httpx connection pool serving dozens of concurrent
requests spends more time managing itself than sending, which cut throughput
threefold at 32 concurrent sessions in the env benchmark.
"""

from __future__ import annotations

import asyncio
import itertools
import json as json_module  # _request's own argument is named json
import secrets
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from shopsimrl.defaults import DEFAULT_CLIENT_TIMEOUT
from shopsimrl.env import wire
from shopsimrl.env.answers import (
    MAX_RESPONSE_BYTES,
    BadResponseError,
    check_healthz,
    check_reset,
    check_step,
    check_task,
    check_task_ids,
    read_capped,
)
from shopsimrl.env.auth import bearer_headers
from shopsimrl.env.types import (
    EnvError,
    EnvUnavailableError,
    LeaseConflictError,
    ResetResult,
    StepResult,
    Task,
)
from shopsimrl.io import json_bytes

KEEPALIVE_EXPIRY = 30.0  # below the server's keep-alive (75 s): never reuse a connection it may be closing
DEFAULT_RELEASE_DEADLINE = 60.0  # seconds a release keeps retrying while the server does not answer

_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)  # the request never left
_NO_REPLY = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)  # broke before a reply


def _json_body(payload: dict[str, Any] | None) -> bytes | None:
    """The request's JSON; text that has no UTF-8 form (half a surrogate pair in an action) goes as its escape
    (httpx's own ``json=`` would raise ``UnicodeEncodeError`` before sending)."""
    return None if payload is None else json_bytes(json_module.dumps(payload, ensure_ascii=False))


class HttpEnvClient:
    def __init__(self, base_url: str, timeout: float = DEFAULT_CLIENT_TIMEOUT, *, connect_retries: int = 3,
                 retry_backoff: float = 0.2, slot_timeout: float | None = None, max_connections: int = 256,
                 shards: int = 32, release_deadline: float = DEFAULT_RELEASE_DEADLINE,
                 keepalive_expiry: float = KEEPALIVE_EXPIRY,
                 transport: httpx.AsyncBaseTransport | None = None, token: str | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        """``timeout``: seconds per request.  ``slot_timeout``: how long the server may wait for a free
        slot in reset (None: its default); the reset request's read timeout is widened by that wait.
        ``connect_retries``: retries of a request that failed before any reply (see the module doc).
        ``max_connections``: a reset waiting for a slot holds its connection, so a caller running more
        sessions than the server has slots needs about one connection per session (the rollout never
        does: it runs at most as many episodes as there are free slots).
        ``token``: the servers' shared token, sent as ``Authorization: Bearer`` (env/auth.py).
        ``max_response_bytes``: a longer answer is a :class:`BadResponseError` (read no further).
        """
        self.base_url = base_url.rstrip("/")
        self.max_response_bytes = max_response_bytes
        self.timeout = timeout
        self.connect_retries = connect_retries
        self.retry_backoff = retry_backoff
        self.slot_timeout = slot_timeout
        self.release_deadline = release_deadline
        self._release_by: float | None = None  # set by hurry(): every release gives up by then
        self.unconfirmed_releases = 0  # releases that gave up (the server reclaims those after its TTL)
        per_shard = max(1, -(-max_connections // max(1, shards)))
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard,
                              keepalive_expiry=keepalive_expiry)
        # one TLS context for every shard: each client would load the CA bundle itself (0.1 s a shard: 3.4 s
        # of a rollout's 5.5 s start with 32 shards), and an http:// server needs none of it anyway
        verify = httpx.create_ssl_context() if transport is None else True
        self._clients = [
            httpx.AsyncClient(base_url=self.base_url, timeout=httpx.Timeout(timeout), limits=limits,
                              transport=transport, headers=bearer_headers(token), verify=verify)
            for _ in range(1 if transport is not None else max(1, shards))
        ]
        self._round_robin = itertools.cycle(range(len(self._clients)))

    def _client_for(self, lease_id: str | None) -> httpx.AsyncClient:
        if lease_id is None:
            return self._clients[next(self._round_robin)]
        return self._clients[zlib.crc32(lease_id.encode()) % len(self._clients)]

    async def _request(self, method: str, path: str, *, json: dict[str, Any] | None = None,
                       params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """The one request path: send, retry what is safe to retry, decode the reply or its error.

        Every endpoint may be repeated after the connection broke before a reply (see the module
        doc for why each is safe); a timeout is never retried here.
        """
        client = self._client_for(json.get("lease_id") if json else None)
        attempt = 0
        while True:
            try:
                request = client.build_request(
                    method, path, content=_json_body(json), params=params,
                    headers={"content-type": "application/json"} if json is not None else None,
                    timeout=httpx.Timeout(timeout) if timeout is not None else httpx.USE_CLIENT_DEFAULT)
                # read_capped bounds the answer's size; this bounds its time (a body dripping byte by byte)
                status, body = await asyncio.wait_for(read_capped(client, request, self.max_response_bytes),
                                                      2 * (timeout or self.timeout) + 1.0)
                break
            except asyncio.TimeoutError as exc:
                raise EnvUnavailableError(f"{method} {path}: no whole answer within "
                                          f"{2 * (timeout or self.timeout) + 1.0:.0f}s") from exc
            except httpx.TransportError as exc:
                retryable = isinstance(exc, (*_UNSENT, *_NO_REPLY))
                attempt += 1
                if retryable and attempt <= self.connect_retries:
                    await asyncio.sleep(self.retry_backoff * 2 ** (attempt - 1))
                    continue
                if isinstance(exc, _UNSENT):
                    raise EnvUnavailableError(f"cannot reach {self.base_url}: {type(exc).__name__}: {exc}") from exc
                if isinstance(exc, httpx.TimeoutException):
                    raise EnvUnavailableError(
                        f"{method} {path} timed out after {timeout or self.timeout}s ({type(exc).__name__})") from exc
                raise EnvUnavailableError(f"{method} {path} failed: {type(exc).__name__}: {exc}") from exc
        if status >= 400:
            error = wire.error_from_body(status, body)
            error.after_retry = attempt > 0  # type: ignore[attr-defined]  # an earlier attempt may have acted
            raise error
        if body is None:
            raise BadResponseError(f"{method} {path}: the answer (HTTP {status}) is not JSON")
        return body

    async def reset(self, task_id: str) -> ResetResult:
        payload: dict[str, Any] = {"task_id": task_id}
        read_timeout = None
        if self.slot_timeout is not None:
            payload["timeout"] = self.slot_timeout
            read_timeout = self.timeout + self.slot_timeout
        else:
            read_timeout = self.timeout + 60.0  # the server's default slot wait is shorter than this
        body = await self._request("POST", "/reset", json=payload, timeout=read_timeout)
        return wire.reset_from_json(check_reset(body, "POST /reset"))

    async def step(self, lease_id: str, action: str) -> StepResult:
        payload = {"lease_id": lease_id, "action": action, "request_id": secrets.token_hex(8)}
        return wire.step_from_json(check_step(await self._request("POST", "/step", json=payload), "POST /step"))

    async def terminate(self, lease_id: str, reason: str) -> StepResult:
        payload = {"lease_id": lease_id, "reason": reason, "request_id": secrets.token_hex(8)}
        body = await self._request("POST", "/terminate", json=payload)
        return wire.step_from_json(check_step(body, "POST /terminate"))

    async def release(self, lease_id: str) -> None:
        """Release, retrying until the server confirms or says the lease is gone (or the deadline passes).

        A 409 on the first attempt is the caller's stale lease (raised); after a failed attempt it
        means an earlier attempt went through, or the server reclaimed the lease: released either way.
        Every release that gives up is counted in ``unconfirmed_releases``.
        """
        loop = asyncio.get_running_loop()
        own_deadline = loop.time() + self.release_deadline

        def deadline() -> float:  # hurry() may bring it forward at any time
            return min(own_deadline, self._release_by or own_deadline)

        attempt = 0
        while True:
            try:
                await self._within(deadline, self._request(
                    "POST", "/release", json={"lease_id": lease_id},
                    timeout=max(0.05, min(self.timeout, deadline() - loop.time()))))
                return
            except LeaseConflictError as exc:
                if attempt or getattr(exc, "after_retry", False):
                    return
                raise
            except EnvError as exc:
                if not (isinstance(exc, EnvUnavailableError) or exc.code.startswith("http_5")
                        or exc.code == "internal_error"):
                    raise
                attempt += 1
                pause = min(2.0, self.retry_backoff * 2 ** (attempt - 1))
                refused = isinstance(exc.__cause__, httpx.ConnectError)  # after _request's own connect retries
                if refused or loop.time() + pause >= deadline():
                    # refused: nothing listens there, so the server's process and its in-memory leases are
                    # gone (a restarted server starts with none); waiting out the deadline frees nothing
                    self.unconfirmed_releases += 1
                    why = "the server is not listening" if refused else "not confirmed before its deadline"
                    raise EnvUnavailableError(f"release gave up: {why}: {exc}") from exc
                await asyncio.sleep(pause)

    @staticmethod
    async def _within(deadline: Callable[[], float], request: Awaitable[Any]) -> Any:
        """Await ``request`` until ``deadline()`` (re-read twice a second: it can move closer)."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(request)
        try:
            while True:
                remaining = deadline() - loop.time()
                if remaining <= 0:
                    raise EnvUnavailableError("gave up: the shutdown deadline passed")
                done, _ = await asyncio.wait({task}, timeout=min(0.5, remaining))
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
            elif not task.cancelled():
                task.exception()  # retrieved either way

    def hurry(self, seconds: float) -> None:
        """Shutting down: every release, running or to come, gives up within ``seconds`` from now."""
        by = asyncio.get_running_loop().time() + seconds
        self._release_by = by if self._release_by is None else min(self._release_by, by)

    async def list_tasks(self, split: str) -> list[str]:
        return check_task_ids(await self._request("GET", "/tasks", params={"split": split}), "GET /tasks")

    async def get_task(self, task_id: str) -> Task:
        return wire.task_from_json(check_task(await self._request("GET", f"/tasks/{task_id}"), "GET /tasks/ID"))

    async def healthz(self) -> dict[str, Any]:
        return dict(check_healthz(await self._request("GET", "/healthz")))

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def __aenter__(self) -> HttpEnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
