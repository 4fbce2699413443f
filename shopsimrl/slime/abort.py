"""slime's abort, honoured by the generate hook: no new work once slime has decided the step is done.

slime ends a rollout step with ``abort()`` (``slime/rollout/sglang_rollout.py``): it sets
``GenerateState(args).aborted = True`` (``GenerateState`` is a process-wide singleton),
asks every SGLang worker to ``/abort_request`` all running requests until it reports
no load, then *waits* for every pending group task.  It cancels nothing.  A generate
hook that ignored the flag would let queued episodes start, and running ones take
more turns, after the step is over: a whole wave of episodes per step instead of the
groups slime meant to stop at.

:class:`AbortWatch` (one per event loop) makes the flag reach every episode:

- :meth:`AbortWatch.aborted` reads the flag, synchronously (the hook checks it on
  entry, after the env-slot gate and before every ``/generate``);
- :meth:`AbortWatch.run` runs one episode and cancels it as soon as the flag is seen
  set; a poller (one task per loop, alive only while episodes run: the last episode
  to end stops it and waits for it) reads the flag
  every :data:`POLL_SECONDS`, so episodes waiting at the env-slot gate, in an env call
  or in a ``/generate`` return at once.  A cancelled episode still releases its env
  lease (``agent.run_episode`` does that shielded from the cancellation).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from shopsimrl.errors import Interrupted

T = TypeVar("T")

#: A callable that says whether slime has started its abort.
AbortFlag = Callable[[], bool]

SLIME_ROLLOUT_MODULE = "slime.rollout.sglang_rollout"
POLL_SECONDS = 0.005  # one attribute read per poll: ~200 cheap wake-ups a second while episodes run


class EpisodeAborted(Interrupted):
    """slime started its abort before this episode ended: the sample is handed back as aborted."""


def never_aborted() -> bool:
    return False


def slime_abort_flag(args: Any) -> AbortFlag:
    """Read ``GenerateState(args).aborted`` of the slime rollout that called the hook.

    The hook is called by slime's ``generate_and_rm``, which has created the
    ``GenerateState`` singleton just before; so ``GenerateState(args)`` returns that
    instance.  Outside slime's rollout module (a standalone caller) nothing aborts.
    slime is never imported here: the module is looked up among the loaded ones.
    """
    module = sys.modules.get(SLIME_ROLLOUT_MODULE)
    state_cls = getattr(module, "GenerateState", None)
    if state_cls is None:
        return never_aborted

    def aborted() -> bool:  # the singleton looked up on every read: a replaced instance is still seen
        return bool(state_cls(args).aborted)

    return aborted


class AbortWatch:
    """Cancels the episodes of one event loop when ``flag`` turns true (see the module docstring)."""

    def __init__(self, flag: AbortFlag, poll_seconds: float = POLL_SECONDS) -> None:
        self.flag = flag
        self.poll_seconds = poll_seconds
        self._running: set[asyncio.Task[Any]] = set()
        self._poller: asyncio.Task[None] | None = None

    def aborted(self) -> bool:
        return self.flag()

    async def run(self, work: Awaitable[T]) -> T:
        """``await work``, unless the flag is (or turns) true first: then raise :class:`EpisodeAborted`.

        On abort the work is cancelled and awaited to its end (its ``finally`` blocks
        release what it holds) before this returns.  A cancellation of the caller is
        passed on to the work the same way, then re-raised.
        """
        if self.aborted():
            if asyncio.iscoroutine(work):
                work.close()
            raise EpisodeAborted
        task = asyncio.ensure_future(work)
        self._running.add(task)
        self._ensure_poller()
        try:
            await _wait_through_cancellation(task)
        finally:
            self._running.discard(task)
            if not self._running:
                await self._stop_poller()
        if task.cancelled():
            raise EpisodeAborted
        return task.result()

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll())

    async def _stop_poller(self) -> None:
        """The last episode ended: end the poller now, so no task of ours outlives the episodes (a loop closed
        right after would otherwise destroy a pending poller)."""
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            await asyncio.wait({poller})

    async def _poll(self) -> None:
        while self._running:
            if self.aborted():
                for task in list(self._running):
                    task.cancel()
            await asyncio.sleep(self.poll_seconds)


async def _wait_through_cancellation(task: asyncio.Task[Any]) -> None:
    """Wait for ``task``; if the caller is cancelled meanwhile, cancel ``task``, wait for its end, re-raise."""
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
            task.cancel()
    if interrupted:
        raise asyncio.CancelledError
