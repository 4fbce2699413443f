"""Session slots and leases.

The env holds a fixed number of slots (the concurrency it promises to serve).
``acquire`` takes a free slot, waiting up to a timeout, and hands out a lease: an
unguessable id that names the episode until ``release``.  A lease id that is
unknown, released or expired is a conflict and never touches another lease's
slot.  A lease idle for longer than ``idle_timeout`` (no reset, step or terminate
on it; a call in progress counts as use) is reclaimed the next time anyone
acquires a slot or reads the counters, so a client that vanished holds its slots
for a bounded time.  ``acquire`` can be abandoned: a waiter whose ``cancelled``
event is set (its HTTP client went away) gives up instead of taking a slot.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from shopsimrl.defaults import DEFAULT_IDLE_TIMEOUT
from shopsimrl.env.types import EnvError, LeaseConflictError, NoFreeSlotError

T = TypeVar("T")


class AcquireAbandoned(EnvError):
    """The caller of a waiting ``acquire`` went away: no slot was taken."""

    code = "client_gone"


@dataclass
class Lease(Generic[T]):
    lease_id: str
    slot: int
    episode: T
    lock: threading.Lock = field(default_factory=threading.Lock)  # serializes this lease's steps
    last_used: float = 0.0  # set by the pool from its clock
    released: bool = False
    last_reply: tuple[str, object] | None = None  # (request id, result) of the last step: retries get it again


class SlotPool(Generic[T]):
    def __init__(self, slots: int, *, idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: the time source of idle expiry (tests drive it by hand)."""
        if slots < 1:
            raise ValueError("slots must be >= 1")
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be > 0 seconds (or None), got {idle_timeout}")
        self.slots = slots
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._cond = threading.Condition()
        self._free = list(range(slots - 1, -1, -1))
        self._leases: dict[str, Lease[T]] = {}
        self.expired = 0
        self._closed = False

    def close(self) -> None:
        """Refuse new leases and wake every waiting ``acquire`` (the env is shutting down)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake every waiting ``acquire`` so it re-checks its ``cancelled`` event."""
        with self._cond:
            self._cond.notify_all()

    def acquire(self, episode: T, timeout: float, cancelled: threading.Event | None = None) -> Lease[T]:
        """Lease a free slot for ``episode``, waiting up to ``timeout`` seconds.

        Raises :class:`AcquireAbandoned` (no slot taken) once ``cancelled`` is set;
        whoever sets it calls :meth:`wake`.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._reclaim_idle()
            while not self._free or self._closed or (cancelled is not None and cancelled.is_set()):
                if self._closed:
                    raise EnvError("the environment is closing; no new episodes", code="env_closed")
                if cancelled is not None and cancelled.is_set():
                    raise AcquireAbandoned("the client went away while waiting for a slot")
                self._reclaim_idle()
                if self._free:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise NoFreeSlotError(f"all {self.slots} slots are leased; waited {timeout:.1f}s")
                self._cond.wait(min(remaining, 1.0))
            lease = Lease(secrets.token_urlsafe(24), self._free.pop(), episode, last_used=self._clock())
            self._leases[lease.lease_id] = lease
            return lease

    def get(self, lease_id: str) -> Lease[T]:
        with self._cond:
            lease = self._leases.get(lease_id) if isinstance(lease_id, str) else None
            if lease is None:
                raise LeaseConflictError("unknown, released or expired lease id")
            lease.last_used = self._clock()
            return lease

    def release(self, lease_id: str) -> Lease[T]:
        """Free the lease's own slot; a stale id raises and frees nothing."""
        with self._cond:
            lease = self._leases.pop(lease_id, None) if isinstance(lease_id, str) else None
            if lease is None:
                raise LeaseConflictError("unknown, released or expired lease id")
            lease.released = True
            self._free.append(lease.slot)
            self._cond.notify()
            return lease

    def _reclaim_idle(self) -> None:
        if self.idle_timeout is None:
            return
        cutoff = self._clock() - self.idle_timeout
        for lease_id, lease in list(self._leases.items()):
            if lease.last_used < cutoff and not lease.lock.locked():
                del self._leases[lease_id]
                lease.released = True
                self._free.append(lease.slot)
                self.expired += 1

    def counters(self) -> dict[str, int]:
        with self._cond:
            self._reclaim_idle()
            return {"slots": self.slots, "free_slots": len(self._free), "leased": len(self._leases),
                    "expired": self.expired}
