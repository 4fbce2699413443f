"""A hostile OpenAI-compatible chat-completions server on 127.0.0.1: one case per kind of bad reply.

The case is the first part of the path: ``POST /<case>/v1/chat/completions`` answers with that case's
reply, every time.  ``CASES`` also says how each case must be filed (docs/agent.md, "What a reply may
hold"): the model's (scored: a mistake with its protocol code, or an action the env plays), the
server's failure (a technical failure, with its type), or a reply whose token count is not known (the
action plays, scored, the count None).

Standard library only, so the server can run as its own process (``python tests/hostile_model.py PORT``,
for the fault suite: ``tests/faults/test_hostile_model_server.py``) or on a thread (``tests/agent``).  A
streamed case stops after ``STREAM_LIMIT_SECONDS`` or when the client goes away, whichever is first.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MiB = 1 << 20
STREAM_LIMIT_SECONDS = 120.0
MANY_CALLS = 20_000


def completion(message: dict[str, Any], *, usage: Any = None, finish: Any = "tool_calls") -> dict[str, Any]:
    return {"id": "chatcmpl-h", "object": "chat.completion", "created": 0, "model": "hostile",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": usage if usage is not None else {"prompt_tokens": 100, "completion_tokens": 10}}


def call(name: Any = "search", arguments: Any = '{"query": "boots"}', id_: Any = "call_0") -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def search(**usage: Any) -> bytes:
    return _json(completion({"content": None, "tool_calls": [call()]}, usage=usage or None))


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _with_choices(choices: Any) -> bytes:
    return _json({"id": "x", "object": "chat.completion", "choices": choices})


def _content(text_json: str) -> bytes:
    """A reply whose content is ``text_json`` written as is (a JSON string literal: escapes stay escapes)."""
    return ('{"choices": [{"index": 0, "message": {"role": "assistant", "content": ' + text_json
            + '}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}').encode()


def _arguments(arguments_json: str) -> bytes:
    return ('{"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c", '
            '"type": "function", "function": {"name": "search", "arguments": ' + arguments_json + '}}]}, '
            '"finish_reason": "tool_calls"}]}').encode()


def _stream(total: int | None) -> Iterator[bytes]:
    """A completion whose content is ``total`` bytes of text (None: endless), one MiB at a time."""
    yield b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
    chunk, sent = b"a" * MiB, 0
    while total is None or sent < total:
        yield chunk
        sent += len(chunk)
    yield b'"}, "finish_reason": "stop"}]}'


@dataclass(frozen=True)
class Case:
    """One kind of reply: the field it puts odd content in, what that content is, how it must be filed."""

    field: str
    content: str
    filed: str  # "model:<protocol code>" | "model:action" (played) | "technical:<error type>" | "unknown-count"
    body: Callable[[], bytes] | None = None  # the whole body (sent with its Content-Length)
    stream: int | None = 0  # bytes of streamed content, no Content-Length (None: endless; 0: not streamed)
    declared: int | None = None  # a Content-Length announced (and the body streamed up to it)
    status: int = 200
    constrained: bool = False  # played with --action-format constrained

    @property
    def technical(self) -> bool:
        return self.filed.startswith("technical:")


CASES: dict[str, Case] = {
    # -- size: the server's (technical), read no further than the cap -------------------------------------------
    "body-200mb-declared": Case("body", "Content-Length of 200 MB", "technical:ReplyTooLarge", declared=200 * MiB),
    "body-200mb": Case("body", "200 MB of content, no Content-Length", "technical:ReplyTooLarge", stream=200 * MiB),
    "body-endless": Case("body", "content that never ends", "technical:ReplyTooLarge", stream=None),
    # -- the shape: the server's (technical), the message says what it sent --------------------------------------
    "body-not-json": Case("body", "text that is not JSON", "technical:BadModelReply", body=lambda: b"<html>oops"),
    "body-nan": Case("body", "NaN outside a string", "technical:BadModelReply",
                     body=lambda: search().replace(b'"prompt_tokens": 100', b'"prompt_tokens": NaN')),
    "body-deep": Case("body", "lists nested 200,000 deep", "technical:BadModelReply",
                      body=lambda: b'{"choices": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"),
    "body-huge-int": Case("body", "a number of 5,000 digits", "technical:BadModelReply",
                          body=lambda: search().replace(b'"prompt_tokens": 100', b'"prompt_tokens": ' + b"9" * 5000)),
    "body-list": Case("body", "a list, not an object", "technical:BadModelReply", body=lambda: b"[1, 2]"),
    "choices-string": Case("choices", '"oops"', "technical:BadModelReply", body=lambda: _with_choices("oops")),
    "choices-empty": Case("choices", "[]", "technical:BadModelReply", body=lambda: _with_choices([])),
    "choices-null-item": Case("choices", "[null]", "technical:BadModelReply", body=lambda: _with_choices([None])),
    "message-string": Case("message", '"hi"', "technical:BadModelReply",
                           body=lambda: _with_choices([{"message": "hi", "finish_reason": "stop"}])),
    "content-number": Case("message.content", "12", "technical:BadModelReply",
                           body=lambda: _json(completion({"content": 12}))),
    "tool-calls-string": Case("message.tool_calls", '"oops"', "technical:BadModelReply",
                              body=lambda: _json(completion({"content": None, "tool_calls": "oops"}))),
    "tool-calls-null-item": Case("message.tool_calls", "[null]", "technical:BadModelReply",
                                 body=lambda: _json(completion({"content": None, "tool_calls": [None]}))),
    "name-number": Case("tool_calls[].function.name", "7", "technical:BadModelReply",
                        body=lambda: _json(completion({"content": None, "tool_calls": [call(name=7)]}))),
    "arguments-object": Case("tool_calls[].function.arguments", '{"query": "boots"} (an object)',
                             "technical:BadModelReply",
                             body=lambda: _json(completion({"content": None, "tool_calls": [call(arguments={"q": 1})]}))),
    "id-number": Case("tool_calls[].id", "3", "technical:BadModelReply",
                      body=lambda: _json(completion({"content": None, "tool_calls": [call(id_=3)]}))),
    "finish-reason-number": Case("choices[].finish_reason", "1", "technical:BadModelReply",
                                 body=lambda: _json(completion({"content": None, "tool_calls": [call()]}, finish=1))),
    "error-escapes": Case("an error answer (HTTP 500)", "ESC sequences and NUL in the message", "technical:ServerRefused",
                          status=500, body=lambda: _json({"error": {"message": "\x1b[2J\x1b]0;owned\x07boom\x00"}})),
    # -- usage: the server's bookkeeping; a count that is no whole number is not known, the turn plays --------
    "usage-string": Case("usage.prompt_tokens", '"12"', "unknown-count", body=lambda: search(prompt_tokens="12")),
    "usage-float": Case("usage.prompt_tokens", "1e308", "unknown-count", body=lambda: search(prompt_tokens=1e308)),
    "usage-negative": Case("usage.completion_tokens", "-5", "unknown-count",
                           body=lambda: search(prompt_tokens=3, completion_tokens=-5)),
    "usage-bool": Case("usage.prompt_tokens", "true", "unknown-count", body=lambda: search(prompt_tokens=True)),
    "usage-huge": Case("usage.prompt_tokens", "10**30", "unknown-count", body=lambda: search(prompt_tokens=10**30)),
    # -- the model's text: scored, whatever it holds ------------------------------------------------------------
    "content-surrogate": Case("message.content", "half a surrogate pair (\\ud800)", "model:no_tool_call",
                              body=lambda: _content('"\\ud800 left alone"')),
    "content-controls": Case("message.content", "NUL, ESC sequences, BEL", "model:no_tool_call",
                             body=lambda: _content('"\\u0000\\u001b[2J\\u001b]0;title\\u0007 hi"')),
    "content-megabytes": Case("message.content", "4 MB of text", "model:no_tool_call",
                              body=lambda: _content('"' + "x" * (4 * MiB) + '"')),
    "arguments-deep": Case("tool_calls[].function.arguments", '"[" * 200000', "model:invalid_arguments",
                           body=lambda: _arguments(json.dumps("[" * 200_000))),
    "arguments-nan": Case("tool_calls[].function.arguments", '{"query": NaN}', "model:invalid_arguments",
                          body=lambda: _arguments(json.dumps('{"query": NaN}'))),
    "arguments-huge-number": Case("tool_calls[].function.arguments", '{"query": 1e999}', "model:invalid_arguments",
                                  body=lambda: _arguments(json.dumps('{"query": 1e999}'))),
    "arguments-surrogate": Case("tool_calls[].function.arguments", '{"query": "\\ud800"} (the pair half in the reply)',
                                "model:action", body=lambda: _arguments('"{\\"query\\": \\"boots \\ud800\\"}"')),
    "arguments-escaped-surrogate": Case("tool_calls[].function.arguments", '{"query": "\\\\ud800"} (an escape in the '
                                        "arguments' JSON)", "model:invalid_arguments",
                                        body=lambda: _arguments(json.dumps('{"query": "\\ud800"}'))),
    "arguments-controls": Case("tool_calls[].function.arguments", "a query with NUL and ESC sequences", "model:action",
                               body=lambda: _arguments(json.dumps(json.dumps({"query": "boots\x00\x1b[2J\x1b]0;t\x07"})))),
    "name-surrogate": Case("tool_calls[].function.name", "\\udc00", "model:unknown_tool",
                           body=lambda: _json(completion({"content": None, "tool_calls": [call(name="\udc00")]}))),
    "many-tool-calls": Case("message.tool_calls", f"{MANY_CALLS:,} calls", "model:multiple_tool_calls",
                            body=lambda: _json(completion({"content": None,
                                                           "tool_calls": [call(id_=f"c{i}") for i in range(MANY_CALLS)]}))),
    "constrained-deep": Case("message.content (constrained)", '"[" * 200000', "model:invalid_arguments",
                             body=lambda: _content(json.dumps("[" * 200_000)), constrained=True),
    "constrained-nan": Case("message.content (constrained)", '{"name": "search", "arguments": {"query": NaN}}',
                            "model:invalid_arguments", constrained=True,
                            body=lambda: _content(json.dumps('{"name": "search", "arguments": {"query": NaN}}'))),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # a streamed body ends when the connection closes
    server: HostileServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (quiet: the tests read no log)
        pass

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        name = self.path.strip("/").split("/")[0]
        self.server.record(name, body)
        case = CASES.get(name)
        if case is None:
            self._send(404, b'{"error": {"message": "no such case"}}')
        elif case.body is not None:
            self._send(case.status, case.body())
        else:
            self._stream(case)

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, case: Case) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if case.declared is not None:
            self.send_header("content-length", str(case.declared))
        self.end_headers()
        deadline = time.monotonic() + STREAM_LIMIT_SECONDS
        try:
            for chunk in _stream(case.declared if case.declared is not None else case.stream):
                self.wfile.write(chunk)
                if time.monotonic() > deadline:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: what the cap is for


class HostileServer(ThreadingHTTPServer):
    """The server; ``requests[case]`` holds the size in bytes of every request body that case received."""

    daemon_threads = True

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.requests: dict[str, list[bytes]] = {}
        self._lock = threading.Lock()

    def record(self, case: str, body: bytes) -> None:
        with self._lock:
            self.requests.setdefault(case, []).append(body)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def base_url(self, case: str) -> str:
        return f"{self.url}/{case}/v1"


@contextmanager
def serving() -> Iterator[HostileServer]:
    """A server on a free loopback port, answering from a thread until the block ends."""
    server = HostileServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    HostileServer(int(sys.argv[1])).serve_forever()
