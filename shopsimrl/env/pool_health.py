"""One env server as an :class:`~shopsimrl.env.pool.EnvPool` sees it: its counts and its health.

The pool routes episodes; this module decides whether a server may take them.  The rules:

* **Failure.** A server that refuses connections is marked down: it gets no new
  resets, its own episodes fail (technical) while the others go on, and its
  ``/healthz`` is retried after a back-off (doubling up to ``max_backoff``).  A call
  that broke mid-way (read error, timeout) fails alone and triggers an immediate
  ``/healthz`` check, which decides.
* **Silence.** A server whose ``/healthz`` has gone unanswered for ``silent_after``
  seconds (a stopped or hung process: nothing refuses, nothing answers) is *silent*;
  the pool's placement avoids it while another server answers.
* **Same shop everywhere.** At start every server's fingerprint (env/fingerprint.py)
  is compared with the first one's; a mix is refused with a message naming the
  server that differs.  A server that comes back with another fingerprint stays out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from shopsimrl.env.answers import check_healthz, read_capped
from shopsimrl.env.auth import UNAUTHORIZED_CODE, bearer_headers
from shopsimrl.env.fingerprint import fingerprint_differences
from shopsimrl.env.types import EnvError, EnvUnavailableError
from shopsimrl.errors import Refusal

log = logging.getLogger(__name__)

DEFAULT_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 30.0
DEFAULT_PROBE_TIMEOUT = 2.0
DEFAULT_SILENT_AFTER = 0.5  # seconds a /healthz may go unanswered before new resets go elsewhere
PROBE_TIMEOUTS_TO_DOWN = 3


class FingerprintMismatchError(Refusal, EnvError):
    """Two env servers serve different catalogs, task sets or action limits."""

    code = "fingerprint_mismatch"


@dataclass(eq=False)
class PoolServer:
    """One server's state in the pool: its slot counts, our leases on it, and its health."""

    url: str
    client: Any
    slots: int = 0
    others: int = 0  # leases held by other clients at the last /healthz
    ours: int = 0  # our leases on it, resets in flight included
    up: bool = True
    failures: int = 0  # consecutive failed contacts: the back-off doubles with each
    slow_probes: int = 0  # consecutive /healthz probes that timed out
    unanswered_since: float | None = None  # when the oldest /healthz probe still without an answer was sent
    check: asyncio.Task[None] | None = None  # a /healthz check started by a failed call
    retry_at: float = 0.0
    excluded: str | None = None  # a reason it may never come back (another fingerprint)
    last_error: str | None = None
    episodes: int = 0  # resets it granted us
    fingerprint: dict[str, Any] = field(default_factory=dict)

    @property
    def free(self) -> int:
        return self.slots - self.others - self.ours

    def silent(self, now: float, after: float) -> bool:
        """Has a /healthz probe gone unanswered for more than ``after`` seconds?"""
        return self.unanswered_since is not None and now - self.unanswered_since > after


def never_reached(error: BaseException) -> bool:
    """True when the request could not even connect: nothing happened on that server."""
    return isinstance(error.__cause__, (httpx.ConnectError, httpx.ConnectTimeout))


class HealthProber:
    """Reads the servers' ``/healthz`` and marks them up, down or excluded (the rules in the module docstring)."""

    def __init__(self, *, token: str | None, probe_timeout: float, backoff: float, max_backoff: float) -> None:
        self.token = token
        self.probe_timeout = probe_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.probe = httpx.AsyncClient(timeout=httpx.Timeout(probe_timeout), headers=bearer_headers(token))
        self.reference: dict[str, Any] | None = None  # the first server's fingerprint: every other must match it

    async def admit(self, servers: Sequence[PoolServer]) -> None:
        """Check every server once: reachable, same fingerprint, token accepted (the pool's ``start``)."""
        bodies = await asyncio.gather(*(self.healthz(s) for s in servers), return_exceptions=True)
        unreachable = [f"{s.url} ({b})" for s, b in zip(servers, bodies) if isinstance(b, BaseException)]
        if unreachable:
            raise EnvUnavailableError("env server(s) not answering /healthz: " + "; ".join(unreachable))
        first = servers[0]
        for server, body in zip(servers, bodies):
            assert isinstance(body, dict)
            fingerprint = body.get("fingerprint")
            if not isinstance(fingerprint, dict):
                raise FingerprintMismatchError(
                    f"env server {server.url} reports no fingerprint in /healthz: it runs an older shopsimrl; "
                    f"run the same version on every server")
            server.fingerprint = fingerprint
            if self.reference is None:
                self.reference = fingerprint
            differences = fingerprint_differences(self.reference, fingerprint)
            if differences:
                raise FingerprintMismatchError(
                    f"env server {server.url} serves another shop than {first.url} "
                    f"({'; '.join(differences)}): start every server with the same --products, --seed, "
                    f"--tasks and --action-limit")
            apply_health(server, body)
        for server in servers:  # in order, so the first server that refuses is the one named
            await self.check_token(server)

    async def healthz(self, server: PoolServer) -> dict[str, Any]:
        """The server's ``/healthz``, size-capped and type-checked (:class:`BadResponseError` otherwise)."""
        try:
            status, body = await asyncio.wait_for(read_capped(
                self.probe, self.probe.build_request("GET", f"{server.url}/healthz")), 2 * self.probe_timeout)
        except httpx.HTTPError as exc:
            raise EnvUnavailableError(f"{type(exc).__name__}: {exc}") from exc
        except asyncio.TimeoutError:  # an answer dripping in: as slow as one that never comes
            slow = httpx.ReadTimeout(f"no whole /healthz answer within {2 * self.probe_timeout:.1f}s")
            raise EnvUnavailableError(f"ReadTimeout: {slow}") from slow
        if status != 200:
            raise EnvUnavailableError(f"/healthz answered HTTP {status}")
        return check_healthz(body)

    async def check_token(self, server: PoolServer) -> None:
        """An authenticated call (``/healthz`` is open), so a wrong token fails here, not in every episode."""
        try:
            status, _body = await read_capped(self.probe, self.probe.build_request(
                "GET", f"{server.url}/tasks", params={"split": "val"}))
        except httpx.HTTPError as exc:
            raise EnvUnavailableError(f"env server {server.url}: {type(exc).__name__}: {exc}") from exc
        if status == 401:
            what = "a wrong token" if self.token else "no token"
            raise EnvError(f"env server {server.url} refuses {what} (HTTP 401): give the servers' shared token "
                           f"(--env-token-file or $SHOPSIM_ENV_TOKEN)", code=UNAUTHORIZED_CODE)

    async def probe_one(self, server: PoolServer) -> None:
        """Read one server's ``/healthz``: revive it, keep it, mark it down or exclude it."""
        if server.unanswered_since is None:
            server.unanswered_since = time.monotonic()  # kept until an answer comes: see PoolServer.silent
        try:
            body = await self.healthz(server)
        except EnvUnavailableError as exc:
            # A slow answer from a busy server is not a dead server: only a refused connection, an
            # error answer or PROBE_TIMEOUTS_TO_DOWN slow answers in a row take it out of placement
            # (until then a silent server only gets no new resets while another one answers).
            slow = isinstance(exc.__cause__, httpx.TimeoutException)
            server.slow_probes = server.slow_probes + 1 if slow else 0
            if not slow:
                server.unanswered_since = None
            if not slow or not server.up or server.slow_probes >= PROBE_TIMEOUTS_TO_DOWN:
                self.mark_down(server, exc)
            return
        server.slow_probes = 0
        server.unanswered_since = None
        fingerprint = body.get("fingerprint")
        differences = (fingerprint_differences(self.reference or {}, fingerprint)
                       if isinstance(fingerprint, dict) else ["no fingerprint"])
        if differences:
            server.excluded = "another fingerprint: " + "; ".join(differences)
            server.up = False
            log.error("env server %s came back serving another shop (%s): it gets no more episodes",
                      server.url, server.excluded)
            return
        apply_health(server, body)
        if not server.up:
            log.warning("env server %s is back after %d failed contact(s)", server.url, server.failures)
        server.up, server.failures, server.last_error = True, 0, None

    def failed(self, server: PoolServer, error: EnvUnavailableError) -> None:
        """A call to ``server`` failed in transport: out at once if it refused the connection, else check it now.

        A request that broke mid-way (a read error, a timeout) is also what a keep-alive race or
        an overloaded server produce: one such failure must not take a live server out, so its
        ``/healthz`` decides (a dead one refuses the connection there too).
        """
        server.last_error = f"{type(error).__name__}: {error}"
        if never_reached(error):
            self.mark_down(server, error)
        elif server.up and (server.check is None or server.check.done()):
            server.check = asyncio.create_task(self.probe_one(server), name=f"shopsim-env-pool-check {server.url}")

    def mark_down(self, server: PoolServer, error: BaseException) -> None:
        server.failures += 1
        delay = min(self.max_backoff, self.backoff * 2 ** (server.failures - 1))
        server.retry_at = time.monotonic() + delay
        server.last_error = f"{type(error).__name__}: {error}"
        if server.up:
            log.warning("env server %s is down (%s); its episodes fail, the others go on; retry in %.1fs",
                        server.url, server.last_error, delay)
        server.up = False

    async def aclose(self) -> None:
        await self.probe.aclose()


def apply_health(server: PoolServer, body: dict[str, Any]) -> None:
    """``body``: a checked ``/healthz`` answer (slot counts are whole numbers >= 0)."""
    server.slots = int(body["slots"])
    # Resets of ours still in flight are not leased there yet: never count below zero.
    server.others = max(0, int(body.get("leased") or 0) - server.ours)
