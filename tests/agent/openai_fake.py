"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (imported as ``agent.openai_fake``).

A tiny FastAPI app (uvicorn in a background thread, free port) answers each request with
the next scripted :class:`Reply`: a well-formed completion, a malformed one, an HTTP error
with the wording of a real engine, a ``Retry-After`` header, or a body trickled one byte at
a time.  It records every request body and its headers, so tests check both what the model
was sent and how its replies are handled.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    trickle_every: float | None = None  # send the body one byte per this many seconds


@dataclass
class ScriptedServer:
    base_url: str
    script: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    disconnected: int = 0  # trickled responses whose client went away before the end

    def load(self, *replies: Reply | tuple[int, dict[str, Any]]) -> None:
        self.script[:] = [r if isinstance(r, Reply) else Reply(*r) for r in replies]
        self.requests.clear()
        self.headers.clear()
        self.disconnected = 0


def _app(server: ScriptedServer) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        server.requests.append(await request.json())
        server.headers.append(dict(request.headers))
        reply = server.script.pop(0) if server.script else Reply(500, {"error": {"message": "script exhausted"}})
        if reply.trickle_every is None:
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)
        payload = JSONResponse(reply.body).body

        async def trickle() -> AsyncIterator[bytes]:
            try:
                for index in range(len(payload)):
                    yield payload[index : index + 1]
                    await asyncio.sleep(reply.trickle_every)
            except asyncio.CancelledError:
                server.disconnected += 1
                raise

        return StreamingResponse(trickle(), status_code=reply.status, media_type="application/json")

    return app


@contextmanager
def scripted_server() -> Iterator[ScriptedServer]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    scripted = ScriptedServer(base_url=f"http://127.0.0.1:{port}/v1")
    uv = uvicorn.Server(uvicorn.Config(_app(scripted), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started:
        assert time.monotonic() < deadline, "scripted server did not start"
        time.sleep(0.01)
    try:
        yield scripted
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
        sock.close()


def reply(*calls: tuple[str, str], text: str | None = None, finish: str | None = None) -> Reply:
    tool_calls = [
        {"id": f"call_{i}_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish or ("tool_calls" if calls else "stop")}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }
    return Reply(200, body)


def error(status: int, message: str | None = None, *, code: Any = None, type_: str = "test",
          headers: dict[str, str] | None = None) -> Reply:
    body = {"error": {"message": message or f"status {status}", "type": type_, "code": status if code is None else code}}
    return Reply(status, body, headers or {})


# The wording real engines use for the model's mistakes (what the tests must recognise).
LLAMA_CPP_BAD_TOOL_CALL = error(
    500, "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, "
         "column 21: syntax error while parsing object - unexpected end of input; expected '}'", type_="server_error")
SGLANG_BAD_TOOL_CALL = error(400, "Failed to parse fc related info to json format!", type_="BadRequestError")
LLAMA_CPP_CONTEXT = error(400, "request (4133 tokens) exceeds the available context size (4096 tokens), try increasing it",
                          type_="exceed_context_size_error")
VLLM_CONTEXT = error(400, "This model's maximum context length is 4096 tokens. However, you requested 4200 tokens "
                          "(3176 in the messages, 1024 in the completion). Please reduce the length of the messages "
                          "or completion.", type_="BadRequestError")
OPENAI_CONTEXT = error(400, "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 "
                            "tokens. Please reduce the length of the messages.", code="context_length_exceeded",
                       type_="invalid_request_error")
SGLANG_CONTEXT = error(400, "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
                       type_="BadRequestError")
VLLM_RAW_TOOL_CALL = reply(text='<tool_call>\n{"name": "search", "arguments": {"query": "red boots"\n</tool_call>')
