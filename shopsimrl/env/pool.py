"""EnvPool: one :class:`~shopsimrl.env.types.EnvClient` over several env servers.

A run that outgrows one server process spreads its episodes over several
(``--env URL1,URL2`` or a comma list in ``SHOPSIM_ENV_URL``).  The rules:

* **Placement.** A reset goes to the server with the most free slots.  Free slots
  are estimated locally, ``slots - leased by other clients - our leases`` (our
  leases include resets in flight), so no health call is made per reset; a
  background task refreshes ``slots`` and the other clients' share from each
  server's ``/healthz`` every ``refresh_interval`` seconds.
* **The gate.** When no server that is up has a free slot, a reset waits in the
  pool until a release or a refresh frees one: the concurrency gate is the sum of
  the servers' free slots, and it shrinks when a server goes down.
* **Binding.** A lease stays on the server that issued it; step, terminate and
  release of that lease go there and nowhere else.  A release whose request broke
  mid-way is repeated once (a repeated release is harmless: 409 when the first
  one landed), so a dropped connection does not leave a slot leased.
* **Failure.** A server that refuses connections is marked down: it gets no new
  resets, its own episodes fail (technical) while the others go on.  A reset whose
  connection was refused never reached its server, so it is tried on another one.
* **Silence.** A server whose ``/healthz`` has gone unanswered for ``silent_after``
  seconds gets no new resets while another server answers; at most
  ``refresh_interval + silent_after`` (1.5 s by default) after it stops.  Its own
  episodes are not moved: their calls fail (technical) after the client timeout.
  When every server up is silent (a machine too busy to answer in time), placement
  goes on over all of them.

How a server is judged up, down, silent or of another shop (back-off, ``/healthz``
checks, fingerprints) is env/pool_health.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from shopsimrl.defaults import DEFAULT_CLIENT_TIMEOUT
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.pool_health import (
    DEFAULT_BACKOFF,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_PROBE_TIMEOUT,
    DEFAULT_SILENT_AFTER,
    FingerprintMismatchError,
    HealthProber,
    PoolServer,
    never_reached,
)
from shopsimrl.env.types import (
    EnvError,
    EnvUnavailableError,
    LeaseConflictError,
    NoFreeSlotError,
    ResetResult,
    StepResult,
    Task,
)

__all__ = ["EnvPool", "FingerprintMismatchError", "make_env_client", "parse_env_urls"]

log = logging.getLogger(__name__)

DEFAULT_REFRESH_INTERVAL = 1.0
_UNKNOWN_LEASE = "unknown or released lease id (not issued through this env pool)"

ClientFactory = Callable[[str], Any]


def parse_env_urls(value: str | Sequence[str]) -> list[str]:
    """``"http://a:5700, http://b:5701/"`` -> ``["http://a:5700", "http://b:5701"]``; refuses bad or repeated URLs."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    urls = [p.strip().rstrip("/") for p in parts if p.strip()]
    if not urls:
        raise ValueError("no env server URL given")
    for url in urls:
        split = urlsplit(url)
        if split.scheme not in ("http", "https") or not split.netloc:
            raise ValueError(f"{url!r} is not an http(s):// URL of an env server")
    repeated = sorted({u for u in urls if urls.count(u) > 1})
    if repeated:
        raise ValueError(f"env server URL given twice: {', '.join(repeated)} (its slots would be counted twice)")
    return urls


class EnvPool:
    """Several env servers behind one EnvClient; see the module docstring for the rules."""

    def __init__(self, urls: str | Sequence[str], *, token: str | None = None, timeout: float = DEFAULT_CLIENT_TIMEOUT,
                 slot_timeout: float | None = None, refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
                 backoff: float = DEFAULT_BACKOFF, max_backoff: float = DEFAULT_MAX_BACKOFF,
                 probe_timeout: float = DEFAULT_PROBE_TIMEOUT, silent_after: float = DEFAULT_SILENT_AFTER,
                 client_factory: ClientFactory | None = None) -> None:
        """``slot_timeout``: how long a reset may wait for a free slot, in the pool and then on the server
        (None: the pool waits as long as some server is up, the server its own default).
        ``silent_after``: seconds a ``/healthz`` may go unanswered before new resets avoid that server.
        ``client_factory(url)``: the per-server client (default :class:`HttpEnvClient` with ``token``)."""
        self.urls = parse_env_urls(urls)
        if refresh_interval <= 0 or backoff <= 0 or max_backoff < backoff or silent_after <= 0:
            raise ValueError("refresh_interval, backoff and silent_after must be > 0, max_backoff >= backoff")
        self.token = token
        self.slot_timeout = slot_timeout
        self.refresh_interval = refresh_interval
        self.silent_after = silent_after
        # Each server carries 1/n of the load: fewer connection-pool shards each (HttpEnvClient's docstring).
        shards = max(4, 32 // len(self.urls))
        factory = client_factory or (lambda url: HttpEnvClient(url, timeout, slot_timeout=slot_timeout, token=token,
                                                               shards=shards))
        self._servers = [PoolServer(url, factory(url)) for url in self.urls]
        self._health = HealthProber(token=token, probe_timeout=probe_timeout, backoff=backoff, max_backoff=max_backoff)
        self._leases: dict[str, PoolServer] = {}
        self._changed: asyncio.Condition | None = None
        self._start_lock: asyncio.Lock | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._closed = False

    # -- start: reachability, fingerprints, token ------------------------------------------------
    async def start(self) -> None:
        """Check every server once (idempotent): reachable, same fingerprint, token accepted.

        Raises :class:`EnvUnavailableError` naming the servers that do not answer,
        :class:`FingerprintMismatchError` naming the one that differs, or an ``unauthorized``
        :class:`EnvError` naming the one that refuses the token.
        """
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
            self._changed = asyncio.Condition()
        async with self._start_lock:
            if self._refresher is not None:
                return
            if self._closed:
                raise EnvError("the env pool is closed", code="env_closed")
            await self._health.admit(self._servers)
            self._refresher = asyncio.create_task(self._refresh_forever(), name="shopsim-env-pool-refresh")

    # -- the background refresh ---------------------------------------------------------------------
    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                await self.refresh()
            except Exception:  # a malformed answer must not end the refreshes (and with them every revival)
                log.exception("env pool: refreshing the servers' /healthz failed; trying again")

    async def refresh(self) -> None:
        """Read ``/healthz`` of every server that is up or due for a retry; revive or mark down."""
        now = time.monotonic()
        due = [s for s in self._servers if s.excluded is None and (s.up or now >= s.retry_at)]
        await asyncio.gather(*(self._health.probe_one(s) for s in due))
        await self._notify()

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    # -- placement ------------------------------------------------------------------------------------
    async def _place(self, skip: set[PoolServer], deadline: float | None) -> PoolServer:
        """The up server with the most free slots (not in ``skip``); waits while every one is full."""
        assert self._changed is not None
        async with self._changed:
            while True:
                candidates = [s for s in self._servers if s.up and s not in skip]
                if not candidates:
                    raise EnvUnavailableError("no env server is up: " + self._describe_down())
                now = time.monotonic()
                answering = [s for s in candidates if not s.silent(now, self.silent_after)]
                best = max(answering or candidates, key=lambda s: (s.free, -s.ours))
                if best.free > 0:
                    best.ours += 1  # taken before the reset is sent, so concurrent resets spread
                    return best
                wait = self.refresh_interval
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        total = sum(s.slots for s in candidates)
                        raise NoFreeSlotError(f"all {total} slots of the {len(candidates)} env server(s) up are "
                                              f"busy; waited {self.slot_timeout:.1f}s")
                try:
                    await asyncio.wait_for(self._changed.wait(), wait)
                except asyncio.TimeoutError:
                    pass

    def _describe_down(self) -> str:
        return "; ".join(f"{s.url}: {s.excluded or s.last_error or 'down'}" for s in self._servers)

    async def _release_slot(self, server: PoolServer) -> None:
        server.ours -= 1
        await self._notify()

    # -- the EnvClient interface ----------------------------------------------------------------------
    async def reset(self, task_id: str) -> ResetResult:
        await self.start()
        deadline = None if self.slot_timeout is None else time.monotonic() + self.slot_timeout
        refused: set[PoolServer] = set()
        while True:
            server = await self._place(refused, deadline)
            try:
                result: ResetResult = await server.client.reset(task_id)
            except EnvUnavailableError as exc:
                await self._release_slot(server)
                self._health.failed(server, exc)
                if never_reached(exc):
                    refused.add(server)  # nothing happened there: the reset may go elsewhere
                    continue
                raise
            except BaseException:
                await self._release_slot(server)
                raise
            server.episodes += 1
            self._leases[result.lease_id] = server
            return result

    def _server_of(self, lease_id: str) -> PoolServer:
        server = self._leases.get(lease_id)
        if server is None:
            raise LeaseConflictError(_UNKNOWN_LEASE)
        return server

    async def _on_lease(self, lease_id: str, call: Callable[[Any], Awaitable[StepResult]]) -> StepResult:
        """``call(client)`` on the lease's own server; a server that fails it is marked (see ``HealthProber.failed``)."""
        server = self._server_of(lease_id)
        try:
            return await call(server.client)
        except EnvUnavailableError as exc:
            self._health.failed(server, exc)
            raise

    async def step(self, lease_id: str, action: str) -> StepResult:
        return await self._on_lease(lease_id, lambda client: client.step(lease_id, action))

    async def terminate(self, lease_id: str, reason: str) -> StepResult:
        return await self._on_lease(lease_id, lambda client: client.terminate(lease_id, reason))

    async def release(self, lease_id: str) -> None:
        """Forget the lease here first (so a dead server never holds our gate), then release it there."""
        server = self._leases.pop(lease_id, None)
        if server is None:
            raise LeaseConflictError(_UNKNOWN_LEASE)
        await self._release_slot(server)
        try:
            await server.client.release(lease_id)
        except EnvUnavailableError as exc:
            if never_reached(exc):
                self._health.failed(server, exc)
                raise
            # Broken mid-way (a keep-alive race, a reset connection): the release may or may not have
            # landed.  It is safe to repeat: a 409 lease_conflict then means the first one did.
            try:
                await server.client.release(lease_id)
            except LeaseConflictError:
                return
            except EnvUnavailableError as again:
                self._health.failed(server, again)
                raise exc from again

    async def _any(self, call: Callable[[Any], Any]) -> Any:
        """A catalog read (same answer everywhere): the first server that answers."""
        await self.start()
        errors = []
        for server in sorted(self._servers, key=lambda s: not s.up):
            if server.excluded is not None:
                continue
            try:
                return await call(server.client)
            except EnvUnavailableError as exc:
                self._health.failed(server, exc)
                errors.append(f"{server.url}: {exc}")
        raise EnvUnavailableError("no env server answered: " + "; ".join(errors))

    async def list_tasks(self, split: str) -> list[str]:
        return list(await self._any(lambda c: c.list_tasks(split)))

    async def get_task(self, task_id: str) -> Task:
        task: Task = await self._any(lambda c: c.get_task(task_id))
        return task

    # -- introspection -----------------------------------------------------------------------------------
    async def healthz(self) -> dict[str, Any]:
        """The pool as one server: summed ``slots`` / ``free_slots`` of the servers up, and each server's state."""
        await self.start()
        await self.refresh()
        servers = self.status()
        up = [s for s in servers if s["up"]]
        return {"ready": bool(up), "slots": sum(s["slots"] for s in up),
                "free_slots": sum(max(0, s["free"]) for s in up), "leased": len(self._leases),
                "fingerprint": self._health.reference, "servers": servers}

    def status(self) -> list[dict[str, Any]]:
        """Per server: url, up, silent, slots, our leases, estimated free slots, resets granted, last error."""
        now = time.monotonic()
        return [{"url": s.url, "up": s.up, "silent": s.silent(now, self.silent_after), "slots": s.slots,
                 "ours": s.ours, "others": s.others, "free": s.free, "episodes": s.episodes, "failures": s.failures,
                 "last_error": s.excluded or s.last_error}
                for s in self._servers]

    def hurry(self, seconds: float) -> None:
        """Shutting down: every server's releases, running or to come, give up within ``seconds`` from now."""
        for server in self._servers:
            hurry = getattr(server.client, "hurry", None)
            if hurry is not None:
                hurry(seconds)

    @property
    def unconfirmed_releases(self) -> int:
        """Releases that gave up, over every server (each server reclaims those after its lease TTL)."""
        return sum(int(getattr(server.client, "unconfirmed_releases", 0)) for server in self._servers)

    @property
    def leases(self) -> int:
        """Leases this pool holds now (a finished run holds none)."""
        return len(self._leases)

    async def aclose(self) -> None:
        self._closed = True
        tasks = [t for t in (self._refresher, *(s.check for s in self._servers)) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        for server in self._servers:
            await server.client.aclose()
        await self._health.aclose()

    async def __aenter__(self) -> EnvPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def make_env_client(urls: str | Sequence[str], *, token: str | None = None, **kwargs: Any) -> Any:
    """One URL: a plain :class:`HttpEnvClient`; several: an :class:`EnvPool` over them."""
    parsed = parse_env_urls(urls)
    if len(parsed) == 1:
        return HttpEnvClient(parsed[0], token=token, **kwargs)
    return EnvPool(parsed, token=token, **kwargs)
