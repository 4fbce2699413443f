"""One chat-completions request over HTTP, its answer read with a size cap: the openai policy's transport.

httpx, not the ``openai`` client: an answer is read as a stream that stops at ``max_reply_bytes``
(:func:`shopsimrl.env.answers.read_capped_bytes`, the reader the env client uses too), so a 200 MB or
endless answer costs at most the cap in memory and ends the turn as a :class:`ReplyTooLarge`, a technical
failure naming the cap.  The answer's JSON is then typed field by field (:mod:`shopsimrl.agent.model_reply`)
instead of being trusted.  Every message built from what a server sent goes through
:func:`shopsimrl.io.printable`: no control character or escape sequence of a server reaches a terminal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import httpx

from shopsimrl.env.answers import json_or_none, read_capped_bytes
from shopsimrl.errors import InfraFailure
from shopsimrl.io import json_bytes, printable

MAX_REPLY_BYTES: Final = 8 << 20  # 20,000 tool calls are ~2 MB; a reply of max_tokens=32k tokens is < 1 MB
SHOWN_ERROR_CHARS: Final = 300  # of a server's error message, in an episode's error record


class ModelServerError(InfraFailure):
    """The model server failed (not the model): the episode is unscored."""


class ServerUnreachable(ModelServerError):
    """No answer: the connection failed or broke (retried)."""


class ReplyTooLarge(ModelServerError):
    """An answer longer than ``max_reply_bytes``: read no further (not retried)."""


class ServerRefused(ModelServerError):
    """An HTTP error status; ``status`` and the server's own words (shown safely) in the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the model server answered HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True)
class ServerAnswer:
    """An answer read whole within the cap: its status, headers, JSON (None: not JSON) and bytes."""

    status: int
    headers: httpx.Headers
    body: Any
    raw: bytes

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    def error_message(self) -> str:
        """The server's own message of an error answer (OpenAI's ``{"error": {"message"}}`` or the text), shown
        safely and cut to :data:`SHOWN_ERROR_CHARS` characters."""
        body = self.body
        inner = body.get("error", body) if isinstance(body, dict) else None
        message = inner.get("message") if isinstance(inner, dict) else inner
        if not isinstance(message, str):
            message = self.text or "(an empty answer)"
        return printable(" ".join(message.split()), limit=SHOWN_ERROR_CHARS)


class ChatClient:
    """``POST {base_url}/chat/completions``; one per event loop (an httpx pool cannot move between loops)."""

    def __init__(self, base_url: str, api_key: str, timeout: float, max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_reply_bytes = max_reply_bytes
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout),
                                       headers={"authorization": f"Bearer {api_key}",
                                                "content-type": "application/json"},
                                       limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100))

    async def post(self, request: dict[str, Any]) -> ServerAnswer:
        """Send one request (``extra_body`` merged into the body); raise :class:`ServerUnreachable` or
        :class:`ReplyTooLarge`, else return the answer, whatever its status."""
        body = {key: value for key, value in request.items() if key != "extra_body"}
        body.update(request.get("extra_body") or {})
        built = self._http.build_request("POST", self.url, content=json_bytes(json.dumps(body, ensure_ascii=False)))
        try:
            response, data = await read_capped_bytes(self._http, built, self.max_reply_bytes, "a model server",
                                                     ReplyTooLarge)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"{type(exc).__name__}: {printable(exc, limit=SHOWN_ERROR_CHARS) or 'no answer'}"
                                    f" ({printable(self.url)})") from exc
        return ServerAnswer(status=response.status_code, headers=response.headers, body=json_or_none(data), raw=data)

    async def aclose(self) -> None:
        await self._http.aclose()
