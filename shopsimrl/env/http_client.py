"""HttpEnvClient: the EnvClient interface over the env server's HTTP API.

Retries happen only on connection errors (the request never reached the
server), because step/terminate/release are not idempotent: a request that
timed out may have been applied.  Error responses are turned back into the same
EnvError subclasses the in-process client raises.

Requests are spread over several small httpx clients ("shards", a lease always
on the same one): one httpx connection pool serving dozens of concurrent
requests spends more time managing itself than sending, which cut throughput
threefold at 32 concurrent sessions in the env benchmark.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from typing import Any

import httpx

from shopsimrl.env import wire
from shopsimrl.env.auth import bearer_headers
from shopsimrl.env.types import EnvError, EnvUnavailableError, ResetResult, StepResult, Task


class HttpEnvClient:
    def __init__(self, base_url: str, timeout: float = 30.0, *, connect_retries: int = 3,
                 retry_backoff: float = 0.2, slot_timeout: float | None = None, max_connections: int = 256,
                 shards: int = 32, transport: httpx.AsyncBaseTransport | None = None,
                 token: str | None = None) -> None:
        """``slot_timeout``: how long the server may wait for a free slot in reset (None: its default).
        ``token``: the servers' shared token, sent as ``Authorization: Bearer`` (env/auth.py).

        The reset request's read timeout is widened by that wait.
        """
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.connect_retries = connect_retries
        self.retry_backoff = retry_backoff
        self.slot_timeout = slot_timeout
        per_shard = max(1, -(-max_connections // max(1, shards)))
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        self._clients = [
            httpx.AsyncClient(base_url=self.base_url, timeout=httpx.Timeout(timeout), limits=limits,
                              transport=transport, headers=bearer_headers(token))
            for _ in range(1 if transport is not None else max(1, shards))
        ]
        self._round_robin = itertools.cycle(range(len(self._clients)))

    def _client_for(self, lease_id: str | None) -> httpx.AsyncClient:
        if lease_id is None:
            return self._clients[next(self._round_robin)]
        return self._clients[zlib.crc32(lease_id.encode()) % len(self._clients)]

    async def _request(self, method: str, path: str, *, json: dict[str, Any] | None = None,
                       params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        client = self._client_for(json.get("lease_id") if json else None)
        attempt = 0
        while True:
            try:
                response = await client.request(
                    method, path, json=json, params=params,
                    timeout=httpx.Timeout(timeout) if timeout is not None else httpx.USE_CLIENT_DEFAULT)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                attempt += 1
                if attempt > self.connect_retries:
                    raise EnvUnavailableError(f"cannot reach {self.base_url}: {exc}") from exc
                await asyncio.sleep(self.retry_backoff * 2 ** (attempt - 1))
            except httpx.TimeoutException as exc:
                raise EnvUnavailableError(f"{method} {path} timed out after {self.timeout}s") from exc
            except httpx.TransportError as exc:
                raise EnvUnavailableError(f"{method} {path} failed: {type(exc).__name__}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise wire.error_from_body(response.status_code, body)
        if body is None:
            raise EnvError(f"{method} {path}: response is not JSON", code="bad_response")
        return body

    async def reset(self, task_id: str) -> ResetResult:
        payload: dict[str, Any] = {"task_id": task_id}
        read_timeout = None
        if self.slot_timeout is not None:
            payload["timeout"] = self.slot_timeout
            read_timeout = self.timeout + self.slot_timeout
        else:
            read_timeout = self.timeout + 60.0  # the server's default slot wait is shorter than this
        return wire.reset_from_json(await self._request("POST", "/reset", json=payload, timeout=read_timeout))

    async def step(self, lease_id: str, action: str) -> StepResult:
        return wire.step_from_json(await self._request("POST", "/step",
                                                       json={"lease_id": lease_id, "action": action}))

    async def terminate(self, lease_id: str, reason: str) -> StepResult:
        return wire.step_from_json(await self._request("POST", "/terminate",
                                                       json={"lease_id": lease_id, "reason": reason}))

    async def release(self, lease_id: str) -> None:
        await self._request("POST", "/release", json={"lease_id": lease_id})

    async def list_tasks(self, split: str) -> list[str]:
        body = await self._request("GET", "/tasks", params={"split": split})
        return list(body["task_ids"])

    async def get_task(self, task_id: str) -> Task:
        return wire.task_from_json(await self._request("GET", f"/tasks/{task_id}"))

    async def healthz(self) -> dict[str, Any]:
        return dict(await self._request("GET", "/healthz"))

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def __aenter__(self) -> HttpEnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
