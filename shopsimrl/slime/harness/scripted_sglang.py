"""SGLang's HTTP endpoints, scripted, on 127.0.0.1: one server that is both slime's router and its worker.

The one scripted SGLang of the project: ``shopsimrl slime check`` (the harness) and the
hook tests (``tests/slime_hooks``) both use it.  slime (``--rollout-external-engine-addrs``,
``--sglang-router-ip/-port``) and the generate hook talk to it as to a pre-launched engine
behind a router:

- ``GET /server_info``: the engine's arguments slime checks against its own
  (``_init_external``); ``POST /workers``: the engine registering with the router;
  ``GET /workers``: the router's worker list, read by ``abort()``;
- ``POST /generate`` (``input_ids``, ``sampling_params``): "decodes" for ``delay`` seconds
  (None: until aborted; a callable: chosen per request), then answers ``reply(body)`` (or,
  without ``reply``, the next entry of the script given to :meth:`ScriptedSGLang.reset`) as
  token ids with logprobs (``meta_info.output_token_logprobs``), cut at ``max_new_tokens``
  with ``finish_reason: length`` as SGLang cuts; ``finish_reason: abort`` if an abort reached
  it first; a script entry :data:`ENGINE_ERROR` answers HTTP 500;
- ``POST /abort_request {"abort_all": true}``: aborts every request running then (later
  requests run normally, as in SGLang); ``GET /v1/loads``: the running requests (``num_reqs``).

Read from any thread: ``generate_calls``, ``generate_after_abort`` (requests received after
an abort and before :meth:`ScriptedSGLang.rearm`), ``abort_calls``, ``aborted_requests``,
``running``; ``requests`` (every ``/generate`` body) and ``replies`` (each answer's ids and
logprobs; logprobs count down over the server's life, so no two tokens share one).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request  # FastAPI reads the handlers' annotations: Request must resolve here
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

#: (text, finish type); "stop" appends the end-of-turn token, as a model stopping there would emit it.
Reply = tuple[str, str]
END = "<|im_end|>"
#: A script entry: the engine fails this request (HTTP 500).
ENGINE_ERROR: Reply = ("HTTP500", "")


def tool_call(name: str, **arguments: Any) -> str:
    """A tool call as a Qwen-style model writes it in its reply."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class ScriptedSGLang:
    def __init__(self, tokenizer: Any = None, reply: Callable[[dict[str, Any]], Reply] | None = None,
                 delay: float | None | Callable[[dict[str, Any]], float | None] = 0.0,
                 server_info: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.reply = reply
        self.delay = delay
        self.server_info = {"enable_memory_saver": False, "tp_size": 1, "pp_size": 1, **(server_info or {})}
        self.script: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[list[int], list[float]]] = []
        self.generate_calls = 0
        self.generate_after_abort = 0
        self.abort_calls = 0
        self.aborted_requests = 0
        self.registered: list[dict[str, Any]] = []
        self._tokens_answered = 0
        self._aborted = False
        self._running: set[asyncio.Future[None]] = set()
        self.port = 0
        app = self.app = FastAPI()
        app.post("/generate")(self.generate)
        app.post("/abort_request")(self.abort_request)
        app.get("/v1/loads")(self.loads)
        app.get("/workers")(self.workers)
        app.post("/workers")(self.register)
        app.get("/server_info")(self.info)
        app.get("/get_server_info")(self.info)
        app.get("/health_generate")(self.health)
        app.get("/health")(self.health)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> int:
        return len(self._running)

    def rearm(self) -> None:
        """A new rollout step: requests after this are not counted as after-abort."""
        self._aborted = False

    def reset(self, script: Sequence[Reply]) -> None:
        """Answer the next requests with ``script``, in order (when no ``reply`` was given); forget past requests."""
        self.script, self.requests, self.replies = list(script), [], []

    def _next(self, body: dict[str, Any]) -> Reply | None:
        if self.reply is not None:
            return self.reply(body)
        return self.script.pop(0) if self.script else None

    async def generate(self, request: Request) -> Any:
        try:
            body = await request.json()
        except ClientDisconnect:  # the client gave up on the request while sending it (an abort)
            return Response(status_code=499)
        self.generate_calls += 1
        self.requests.append(body)
        if self._aborted:
            self.generate_after_abort += 1
        aborted = asyncio.get_running_loop().create_future()
        self._running.add(aborted)
        try:
            delay = self.delay(body) if callable(self.delay) else self.delay
            await asyncio.wait_for(asyncio.shield(aborted), timeout=delay)
        except asyncio.TimeoutError:
            pass
        finally:
            self._running.discard(aborted)
        answer = None if aborted.done() else self._next(body)
        if answer is None:
            self.aborted_requests += aborted.done()
            meta = {"output_token_logprobs": [], "finish_reason": {"type": "abort", "message": "Abort request"}}
            return JSONResponse({"text": "", "meta_info": meta})
        if answer == ENGINE_ERROR:
            return JSONResponse({"error": "engine crashed"}, status_code=500)
        text, finish = answer
        if finish == "stop":
            text += END
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        limit = body["sampling_params"]["max_new_tokens"]
        if len(ids) > limit:  # SGLang stops at max_new_tokens
            ids, finish = ids[:limit], "length"
        logprobs = [-(self._tokens_answered + i + 1) / 1000 for i in range(len(ids))]
        self._tokens_answered += len(ids)
        self.replies.append((ids, logprobs))
        meta = {"output_token_logprobs": [[lp, t, None] for lp, t in zip(logprobs, ids)],
                "finish_reason": {"type": finish}, "completion_tokens": len(ids)}
        return JSONResponse({"text": self.tokenizer.decode(ids), "meta_info": meta})

    async def abort_request(self, request: Request) -> Any:
        body = await request.json()
        if body.get("abort_all") is not True:
            return JSONResponse({"error": "abort_all expected"}, status_code=400)
        self.abort_calls += 1
        self._aborted = True
        for future in list(self._running):
            self._running.discard(future)  # aborted: no longer running, as SGLang's load reports at once
            if not future.done():
                future.set_result(None)
        return JSONResponse({})

    async def loads(self) -> Any:
        return JSONResponse({"num_reqs": self.running})

    async def workers(self) -> Any:
        return JSONResponse({"workers": [{"url": self.url}]})

    async def register(self, request: Request) -> Any:
        self.registered.append(await request.json())
        return JSONResponse({"status": "ok"})

    async def info(self) -> Any:
        return JSONResponse(self.server_info)

    async def health(self) -> Any:
        return JSONResponse({})


@contextmanager
def serving(server: ScriptedSGLang) -> Iterator[ScriptedSGLang]:
    """Run ``server`` on a free 127.0.0.1 port in a thread (``server.port``); stop it (bounded) on exit, also on failure."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        server.port = probe.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(server.app, host="127.0.0.1", port=server.port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not uv.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the scripted SGLang server did not start")
            time.sleep(0.02)
        yield server
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
