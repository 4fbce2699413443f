"""A shared bearer token for env servers reachable beyond loopback.

An env server bound to 127.0.0.1 is reachable only from its own machine and
needs no token.  Bound to anything else (a node's address, 0.0.0.0), anyone on
the network could reset, step and release sessions, so the server refuses to
start without a token (``--token-file`` or ``$SHOPSIM_ENV_TOKEN``) unless told
``--insecure``.  Clients send the token as ``Authorization: Bearer <token>``;
every endpoint but ``/healthz`` answers 401 JSON to a missing or wrong one,
as soon as the request head is in (the body is never read) and closing the
connection.  A token is printable ASCII (what a header carries unchanged); it is
compared as bytes with the header's raw bytes by :func:`hmac.compare_digest`
(constant time), so response times do not reveal how much of a guess was right.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import socket
import stat
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from shopsimrl.errors import Refusal

TOKEN_ENV = "SHOPSIM_ENV_TOKEN"  # the token itself
TOKEN_FILE_ENV = "SHOPSIM_ENV_TOKEN_FILE"  # or a file holding it
MIN_TOKEN_CHARS = 16
OPEN_PATHS = frozenset({"/healthz"})  # readiness and slot counts only: no session details
UNAUTHORIZED_CODE = "unauthorized"
TOKEN_HINT = "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))' > env.token && chmod 600 env.token"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TokenError(Refusal, ValueError):
    """A token that cannot be used (missing file, empty, too short); the message says what to change."""


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in ``path`` (surrounding whitespace stripped); refuses an empty or short one."""
    file = Path(path).expanduser()
    try:
        token = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise TokenError(f"cannot read the token file {file}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise TokenError(f"the token file {file} is not text; {TOKEN_HINT}") from None
    return _checked(token, f"the token file {file}")


def _checked(token: str, where: str) -> str:
    if not token:
        raise TokenError(f"{where} is empty; {TOKEN_HINT}")
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"{where} holds a token of {len(token)} characters; use at least {MIN_TOKEN_CHARS} ({TOKEN_HINT})")
    if any(ch.isspace() for ch in token):
        raise TokenError(f"{where} holds a token with whitespace inside; use one word ({TOKEN_HINT})")
    bad = next((ch for ch in token if not "!" <= ch <= "~"), None)
    if bad is not None:
        raise TokenError(f"{where} holds the character {bad!r}, which cannot travel in an HTTP header: a token "
                         f"is printable ASCII only ({TOKEN_HINT})")
    return token


def load_token(token_file: str | os.PathLike[str] | None = None,
               environ: MutableMapping[str, str] | None = None) -> str | None:
    """The shared token: ``token_file``, else ``$SHOPSIM_ENV_TOKEN``, else ``$SHOPSIM_ENV_TOKEN_FILE``, else None."""
    environ = os.environ if environ is None else environ
    if token_file:
        return read_token_file(token_file)
    value = environ.get(TOKEN_ENV, "")
    if value.strip():
        return _checked(value.strip(), f"${TOKEN_ENV}")
    path = environ.get(TOKEN_FILE_ENV, "")
    if path.strip():
        return read_token_file(path.strip())
    return None


def token_file_is_private(path: str | os.PathLike[str]) -> bool:
    """False when group or others may read the file (a warning, not an error: shared filesystems vary)."""
    return not (Path(path).expanduser().stat().st_mode & (stat.S_IRGRP | stat.S_IROTH))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and names that resolve only to loopback addresses (``localhost``)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def bind_refusal(host: str, token: str | None, insecure: bool) -> str | None:
    """Why serving on ``host`` with this token setting is refused (None: allowed)."""
    if token is not None or insecure or is_loopback(host):
        return None
    return (f"--host {host} is reachable beyond this machine: give a shared token with --token-file FILE "
            f"(or ${TOKEN_ENV} / ${TOKEN_FILE_ENV}), or pass --insecure to serve without one; {TOKEN_HINT}")


def token_matches(expected: str, authorization: bytes | None) -> bool:
    """Do an ``Authorization`` header's raw bytes carry ``Bearer <expected>``?  Constant time in the token's
    content; the header is never decoded (``expected`` is ASCII: :func:`_checked`)."""
    if not authorization:
        return False
    scheme, _, given = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(given.strip(b" \t"), expected.encode("ascii"))


def bearer_headers(token: str | None) -> dict[str, str]:
    """What a client sends (nothing without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


_UNAUTHORIZED_BODY = json.dumps({"error": {"code": UNAUTHORIZED_CODE,
                                           "message": "missing or wrong bearer token (Authorization: Bearer <token>)"}})


class BearerTokenMiddleware:
    """Pure ASGI middleware (no per-request task, unlike Starlette's BaseHTTPMiddleware), outermost: it runs
    before :class:`~shopsimrl.env.request_limits.RequestLimits` reads the body.

    Every HTTP request but those to :data:`OPEN_PATHS` must carry the token; others get 401
    ``{"error": {"code": "unauthorized", ...}}`` with ``WWW-Authenticate: Bearer``.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = _checked(token, "the server token")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        authorization = None
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                authorization = value
                break
        if token_matches(self._token, authorization):
            await self.app(scope, receive, send)
            return
        body = _UNAUTHORIZED_BODY.encode("utf-8")
        # connection: close, so the server never reads the body it was sent (up to MAX_BODY_BYTES each)
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
