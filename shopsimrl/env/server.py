"""The env's HTTP server: FastAPI over one ShopSimEnv, and its life (foreground, or on a thread).

Every env call runs in a worker thread (anyio.to_thread), so the event loop
never blocks; steps use a bounded thread limiter of their own.  ``/reset`` may
wait for a free slot, so it runs on a separate limiter: waiting resets cannot
take the threads that the steps and releases which free slots need.  Every error,
including FastAPI's own validation errors, is ``{"error": {"code", "message"}}``.

The size and time limits on a request sit in front of everything (``request_limits.py``).
Idle keep-alive connections stay open ``KEEP_ALIVE`` seconds, far longer than
:class:`~shopsimrl.env.http_client.HttpEnvClient` keeps them, so the client never sends into a
connection the server is closing.

A ``/reset`` whose client goes away (disconnect or client timeout) while it
waits for a slot gives up without taking one; if the slot was taken just as the
client left, it is released at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import anyio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from shopsimrl.defaults import DEFAULT_HOST, DEFAULT_PORT, KEEP_ALIVE
from shopsimrl.env import wire
from shopsimrl.env.auth import BearerTokenMiddleware
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.fingerprint import env_fingerprint
from shopsimrl.env.request_limits import (
    BODY_TIMEOUT,
    HEAD_TIMEOUT,
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    RequestLimits,
    bounded_header_protocol,
)
from shopsimrl.env.sessions import AcquireAbandoned
from shopsimrl.env.types import EnvError
from shopsimrl.io import json_bytes


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetRequest(_Body):
    task_id: str = Field(min_length=1, max_length=256)
    timeout: float | None = Field(default=None, ge=0, le=600, allow_inf_nan=False)  # NaN: not a finite number


class StepRequest(_Body):
    lease_id: str = Field(min_length=1, max_length=256)
    action: str  # any length within the body limit: the env answers an over-long action with feedback, as in-process
    request_id: str | None = Field(default=None, min_length=1, max_length=64)  # a retry repeats it


class TerminateRequest(_Body):
    lease_id: str = Field(min_length=1, max_length=256)
    reason: str = Field(min_length=1, max_length=64)
    request_id: str | None = Field(default=None, min_length=1, max_length=64)


class ReleaseRequest(_Body):
    lease_id: str = Field(min_length=1, max_length=256)


def _json(data: Any, status: int = 200) -> Response:
    # Plain json.dumps: the payloads are already JSON-ready dicts, no encoder pass needed.  json_bytes: a lone
    # surrogate in any text (half a pair in an action string) is sent as its JSON escape, never a 500.
    return Response(json_bytes(json.dumps(data, ensure_ascii=False)), status_code=status, media_type="application/json")


def create_app(env: ShopSimEnv, *, threads: int = 16, max_body: int = MAX_BODY_BYTES,
               max_headers: int = MAX_HEADER_BYTES, body_timeout: float = BODY_TIMEOUT,
               token: str | None = None, instance: str | None = None) -> FastAPI:
    """The app; ``threads`` bounds the worker threads running steps (searches release the GIL).

    ``token``: every endpoint but ``/healthz`` then requires ``Authorization: Bearer <token>`` (env/auth.py).
    ``instance``: a nonce ``/healthz`` reports, by which ``env serve --processes`` knows its own children.
    """
    app = FastAPI(title="ShopSim", version="1", docs_url="/docs", redoc_url=None)
    app.add_middleware(RequestLimits, max_body=max_body, max_headers=max_headers,  # type: ignore[arg-type]
                       body_timeout=body_timeout)
    if token is not None:  # added last, so outermost: a request without the token is refused before its body is read
        app.add_middleware(BearerTokenMiddleware, token=token)  # type: ignore[arg-type]
    fingerprint = env_fingerprint(env)  # immutable for the env's life: computed once
    reset_limiter = anyio.CapacityLimiter(env.slots + 8)
    ops_limiter = anyio.CapacityLimiter(threads)

    async def run(fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=ops_limiter)

    @app.exception_handler(EnvError)
    async def _env_error(_request: Request, exc: EnvError) -> Response:
        return _json(wire.error_body(exc.code, exc.message), wire.status_for(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return _json(wire.error_body("invalid_request", problems or "malformed request"), 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        return _json(wire.error_body(code, str(exc.detail)), exc.status_code)

    @app.exception_handler(Exception)
    async def _internal_error(_request: Request, exc: Exception) -> Response:
        return _json(wire.error_body("internal_error", f"{type(exc).__name__}: {exc}"), 500)

    waiting: set[threading.Event] = set()  # the `gone` events of resets in progress
    closing = threading.Event()

    def end_waiting_resets() -> None:
        """Shutting down: every reset still waiting for a slot ends now (503 env_closed), and so does any new one."""
        closing.set()
        for event in list(waiting):
            event.set()
        env.pool.wake()

    app.state.end_waiting_resets = end_waiting_resets

    def shutting_down() -> Response:
        return _json(wire.error_body("env_closed", "the env server is shutting down; no new episodes"), 503)

    @app.post("/reset")
    async def reset(body: ResetRequest, request: Request) -> Response:
        if closing.is_set():
            return shutting_down()
        gone = threading.Event()
        waiting.add(gone)

        async def watch_disconnect() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gone.set()
            env.pool.wake()

        failure: BaseException | None = None
        async with anyio.create_task_group() as watchers:
            watchers.start_soon(watch_disconnect)
            try:
                result = await anyio.to_thread.run_sync(
                    lambda: env.reset(body.task_id, timeout=body.timeout, cancelled=gone), limiter=reset_limiter)
            except Exception as exc:  # raised outside the task group, so it is not wrapped in a group
                failure = exc
            finally:
                watchers.cancel_scope.cancel()
                waiting.discard(gone)
        if isinstance(failure, AcquireAbandoned):
            return shutting_down() if closing.is_set() else _json(wire.error_body(failure.code, failure.message), 499)
        if failure is not None:
            raise failure
        if gone.is_set():  # the slot came just as the client left (or the server closes): nobody else releases it
            await run(env.release, result.lease_id)
            if closing.is_set():
                return shutting_down()
            return _json(wire.error_body("client_gone", "the client went away; the slot was released"), 499)
        return _json(wire.reset_to_json(result))

    @app.post("/step")
    async def step(body: StepRequest) -> Response:
        return _json(wire.step_to_json(await run(
            lambda: env.step(body.lease_id, body.action, request_id=body.request_id))))

    @app.post("/terminate")
    async def terminate(body: TerminateRequest) -> Response:
        return _json(wire.step_to_json(await run(
            lambda: env.terminate(body.lease_id, body.reason, request_id=body.request_id))))

    @app.post("/release")
    async def release(body: ReleaseRequest) -> Response:
        await run(env.release, body.lease_id)
        return _json({"released": True})

    @app.get("/tasks")
    def tasks(split: str = "train") -> Response:
        return _json({"split": split, "task_ids": env.list_tasks(split)})

    @app.get("/tasks/{task_id}")
    def task(task_id: str) -> Response:
        return _json(wire.task_to_json(env.get_task(task_id)))

    @app.get("/healthz")
    def healthz() -> Response:
        extra = {"instance": instance} if instance is not None else {}
        return _json({**env.health(), "fingerprint": fingerprint, **extra})

    @app.get("/counters")
    def counters() -> Response:
        return _json(env.counters())

    return app


class _Server(uvicorn.Server):
    """uvicorn's server, which on shutdown first ends every reset still waiting for a slot.

    uvicorn waits for every running request before it exits, and a reset may wait for a slot
    as long as its client asked (up to 600 s): SIGTERM used to take minutes.  The waits now end
    at once with ``env_closed`` (503); steps and releases in flight finish as before.
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._app.state.end_waiting_resets()  # see create_app
        await super().shutdown(sockets)


def _server(env: ShopSimEnv, host: str, port: int, *, log_level: str, keep_alive: int, token: str | None,
            head_timeout: float, instance: str | None, lifespan: str, limits: dict[str, Any]) -> _Server:
    app = create_app(env, token=token, instance=instance, **limits)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, lifespan=lifespan,
                            timeout_keep_alive=keep_alive,
                            http=bounded_header_protocol(limits.get("max_headers", MAX_HEADER_BYTES), head_timeout))
    return _Server(config, app)


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, made before the env is loaded, so a busy port fails at once.

    Raises ``OSError`` (e.g. ``EADDRINUSE``), ``OverflowError`` for a port beyond 65535.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except BaseException:
        sock.close()
        raise
    return sock


def serve(env: ShopSimEnv, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, log_level: str = "warning",
          keep_alive: int = KEEP_ALIVE, token: str | None = None, head_timeout: float = HEAD_TIMEOUT,
          instance: str | None = None, sock: socket.socket | None = None, **limits: Any) -> None:
    """Run the server in the foreground until interrupted (``limits``: see :func:`create_app`).

    ``sock``: a socket from :func:`bind_socket` (else one is bound here).  ``instance``: reported on
    ``/healthz``, so a supervisor can tell its own child from whatever else holds the port.
    """
    server = _server(env, host, port, log_level=log_level, keep_alive=keep_alive, token=token,
                     head_timeout=head_timeout, instance=instance, lifespan="auto", limits=limits)
    server.run(sockets=[sock] if sock is not None else None)


class ServerThread:
    """Run the server on a background thread (tests, benchmarks, notebooks).

    ``port=0`` picks a free port; ``url`` tells which one once started.
    """

    def __init__(self, env: ShopSimEnv, host: str = DEFAULT_HOST, port: int = 0, *,
                 log_level: str = "warning", keep_alive: int = KEEP_ALIVE, token: str | None = None,
                 head_timeout: float = HEAD_TIMEOUT, instance: str | None = None, **limits: Any) -> None:
        self._server = _server(env, host, port, log_level=log_level, keep_alive=keep_alive, token=token,
                               head_timeout=head_timeout, instance=instance, lifespan="off", limits=limits)
        self._thread = threading.Thread(target=self._server.run, name="shopsim-server", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout: float = 10.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("env server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10.0)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
