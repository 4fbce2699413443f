"""The env server's limits on a request, in front of the app: size and time, each refused with a closed connection.

A body over ``MAX_BODY_BYTES`` is answered 413 from its Content-Length before any of it is read (a
chunked body is cut off at the limit); headers over ``MAX_HEADER_BYTES`` get 431 (cut off while they
arrive: :func:`bounded_header_protocol`); a request head that is not complete ``HEAD_TIMEOUT`` seconds
after the connection opened (or after its first byte, on a kept-alive connection), and a body that does
not arrive within ``BODY_TIMEOUT`` seconds, get 408.  :class:`RequestLimits` is the ASGI half (it sees
whole heads and bodies), :func:`bounded_header_protocol` the uvicorn half (it sees bytes as they arrive).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from shopsimrl.env import wire

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

