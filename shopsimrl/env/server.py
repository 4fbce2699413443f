"""The env's HTTP server: FastAPI over one ShopSimEnv.

Every env call runs in a worker thread (anyio.to_thread), so the event loop
never blocks; steps use a bounded thread limiter of their own.  ``/reset`` may
wait for a free slot, so it runs on a separate limiter: waiting resets cannot
take the threads that the steps and releases which free slots need.  Every error,
including FastAPI's own validation errors, is ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from shopsimrl.env import wire
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.types import EnvError


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetRequest(_Body):
    task_id: str = Field(min_length=1, max_length=256)
    timeout: float | None = Field(default=None, ge=0, le=600)


class StepRequest(_Body):
    lease_id: str = Field(min_length=1, max_length=256)
    action: str  # any length: the env answers an over-long action with feedback, as in-process


class TerminateRequest(_Body):
    lease_id: str = Field(min_length=1, max_length=256)
    reason: str = Field(min_length=1, max_length=64)


class ReleaseRequest(_Body):
    lease_id: str = Field(min_length=1, max_length=256)


def _json(data: Any, status: int = 200) -> Response:
    # Plain json.dumps: the payloads are already JSON-ready dicts, no encoder pass needed.
    return Response(json.dumps(data, ensure_ascii=False), status_code=status, media_type="application/json")


def create_app(env: ShopSimEnv, *, threads: int = 16) -> FastAPI:
    """The app; ``threads`` bounds the worker threads running steps (searches release the GIL)."""
    app = FastAPI(title="ShopSim", version="1", docs_url="/docs", redoc_url=None)
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

    @app.post("/reset")
    async def reset(body: ResetRequest) -> Response:
        result = await anyio.to_thread.run_sync(lambda: env.reset(body.task_id, timeout=body.timeout),
                                                limiter=reset_limiter)
        return _json(wire.reset_to_json(result))

    @app.post("/step")
    async def step(body: StepRequest) -> Response:
        return _json(wire.step_to_json(await run(env.step, body.lease_id, body.action)))

    @app.post("/terminate")
    async def terminate(body: TerminateRequest) -> Response:
        return _json(wire.step_to_json(await run(env.terminate, body.lease_id, body.reason)))

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
        return _json(env.health())

    @app.get("/counters")
    def counters() -> Response:
        return _json(env.counters())

    return app


def serve(env: ShopSimEnv, host: str = "127.0.0.1", port: int = 5700, *, log_level: str = "warning") -> None:
    """Run the server in the foreground until interrupted."""
    import uvicorn

    uvicorn.run(create_app(env), host=host, port=port, log_level=log_level, access_log=False)


class ServerThread:
    """Run the server on a background thread (tests, benchmarks, notebooks).

    ``port=0`` picks a free port; ``url`` tells which one once started.
    """

    def __init__(self, env: ShopSimEnv, host: str = "127.0.0.1", port: int = 0, *,
                 log_level: str = "warning") -> None:
        import threading

        import uvicorn

        config = uvicorn.Config(create_app(env), host=host, port=port, log_level=log_level, access_log=False,
                                lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="shopsim-server", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout: float = 10.0) -> ServerThread:
        import time

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
