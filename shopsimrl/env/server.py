"""The env's HTTP server: FastAPI over one ShopSimEnv.

Every env call runs in a worker thread (anyio.to_thread), so the event loop
never blocks; steps use a bounded thread limiter of their own.  ``/reset`` may
wait for a free slot, so it runs on a separate limiter: waiting resets cannot
take the threads that the steps and releases which free slots need.  Every error,
including FastAPI's own validation errors, is ``{"error": {"code", "message"}}``.

Limits (:class:`RequestLimits`, in front of everything): a body over
``MAX_BODY_BYTES`` is answered 413 from its Content-Length before any of it is
read (a chunked body is cut off at the limit); headers over ``MAX_HEADER_BYTES``
get 431 (cut off while they arrive: :func:`bounded_header_protocol`); a request
head that is not complete ``HEAD_TIMEOUT`` seconds after the connection opened (or
after its first byte, on a kept-alive connection), and a body that does not arrive
within ``BODY_TIMEOUT`` seconds, get 408 and the connection is closed.  Idle keep-alive connections stay open ``KEEP_ALIVE``
seconds, far longer than :class:`~shopsimrl.env.http_client.HttpEnvClient` keeps
them, so the client never sends into a connection the server is closing.

A ``/reset`` whose client goes away (disconnect or client timeout) while it
waits for a slot gives up without taking one; if the slot was taken just as the
client left, it is released at once.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from shopsimrl.env import wire
from shopsimrl.env.auth import BearerTokenMiddleware
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.defaults import DEFAULT_HOST, DEFAULT_PORT, KEEP_ALIVE
from shopsimrl.env.fingerprint import env_fingerprint
from shopsimrl.env.sessions import AcquireAbandoned
from shopsimrl.env.types import EnvError

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a step body is a few KiB at most
MAX_HEADER_BYTES = 64 << 10  # 64 KiB of request line + headers
BODY_TIMEOUT = 10.0  # seconds for a whole request body to arrive
HEAD_TIMEOUT = 10.0  # seconds for a request line and headers to arrive (bounded_header_protocol)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class RequestLimits:
    """ASGI middleware: size and time limits on a request, applied before the app sees it.

    The body is read here, whole and bounded, then handed to the app; later
    ``receive`` calls go to the server (so the app still learns of a disconnect).
    """

    def __init__(self, app: Any, *, max_body: int = MAX_BODY_BYTES, max_headers: int = MAX_HEADER_BYTES,
                 body_timeout: float = BODY_TIMEOUT) -> None:
        self.app = app
        self.max_body = max_body
        self.max_headers = max_headers
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        if sum(len(k) + len(v) + 4 for k, v in headers) + len(scope.get("raw_path") or b"") > self.max_headers:
            await _refuse(send, 431, "headers_too_large", f"request headers exceed {self.max_headers} bytes")
            return
        length = None
        for key, value in headers:
            if key == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    await _refuse(send, 400, "bad_content_length", "Content-Length is not a number")
                    return
        if length is not None and length > self.max_body:
            await _refuse(send, 413, "body_too_large",
                          f"request body is {length} bytes; the limit is {self.max_body} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        with anyio.move_on_after(self.body_timeout) as deadline:
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client left before sending its body: nothing to answer
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    await _refuse(send, 413, "body_too_large", f"request body exceeds {self.max_body} bytes")
                    return
                chunks.append(chunk)
                more = message.get("more_body", False)
        if deadline.cancelled_caught:
            await _refuse(send, 408, "body_timeout",
                          f"the request body did not arrive within {self.body_timeout:g} seconds")
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _closing_reply(status: bytes, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 error reply that announces the close, written straight to the transport."""
    body = json.dumps(wire.error_body(code, message)).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def bounded_header_protocol(max_headers: int = MAX_HEADER_BYTES, head_timeout: float = HEAD_TIMEOUT) -> type:
    """uvicorn's httptools protocol with two limits on a request head, neither of which uvicorn has.

    Size: a request whose headers go on past ``max_headers`` bytes is refused (431, connection
    closed) *while they arrive*: the parser never buffers more than that plus one socket read
    (httptools itself has no limit; a 50 MB header used to be read whole).

    Time: the head must be complete ``head_timeout`` seconds after the connection opened (first
    request) or after its first byte (later ones); else 408 and the connection is closed.  uvicorn's
    ``timeout_keep_alive`` covers only an idle connection after a reply, and any byte cancels it, so
    a silent new connection or one trickling half a header used to stay open forever.
    """
    too_large = _closing_reply(b"431 Request Header Fields Too Large", "headers_too_large",
                               f"request headers exceed {max_headers} bytes")
    too_slow = _closing_reply(b"408 Request Timeout", "head_timeout",
                              f"the request head did not arrive within {head_timeout:g} seconds")

    class BoundedHeaders(HttpToolsProtocol):  # type: ignore[misc]
        _in_headers = True  # the first request's headers start with the first byte
        _header_bytes = 0
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_headers, self._header_bytes = True, 0
            if self._head_deadline is None:
                self._arm_head_deadline()

        def on_headers_complete(self) -> None:
            self._in_headers = False
            self._disarm_head_deadline()
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            if self._in_headers:
                if self._header_bytes > max_headers:
                    self._close_with(too_large)
                    return
                self._header_bytes += len(data)
            super().data_received(data)

        def _arm_head_deadline(self) -> None:
            self._head_deadline = self.loop.call_later(head_timeout, self._close_with, too_slow)

        def _disarm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _close_with(self, reply: bytes) -> None:
            self._disarm_head_deadline()
            if not self.transport.is_closing():
                if self.cycle is None or self.cycle.response_complete:  # never inside a pipelined reply
                    self.transport.write(reply)
                self.transport.close()

    return BoundedHeaders


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    """An error reply that also closes the connection (the rest of the request is never read)."""
    body = json.dumps(wire.error_body(code, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetRequest(_Body):
    task_id: str = Field(min_length=1, max_length=256)
    timeout: float | None = Field(default=None, ge=0, le=600)


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
    # Plain json.dumps: the payloads are already JSON-ready dicts, no encoder pass needed.
    return Response(json.dumps(data, ensure_ascii=False), status_code=status, media_type="application/json")


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
