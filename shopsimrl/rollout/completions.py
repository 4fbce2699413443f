"""Group tasks that report their own completion, so the driver sees finished groups in O(1) each.

Each task pushes itself into an :class:`asyncio.Queue` from a done-callback, instead of an
``asyncio.wait`` over the whole pending set at every completion (4,096 groups in flight: see
``benchmarks/bench_rollout.py``).  A batch is what slime's loop sees: the first finished task and
every other one already finished with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from functools import partial
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class CompletionQueue(Generic[K, T]):
    """Tasks that report their own completion: O(1) per finished task, batches as slime sees them."""

    def __init__(self) -> None:
        self._pending: dict[K, asyncio.Task[T]] = {}
        self._done: asyncio.Queue[tuple[K, asyncio.Task[T]]] = asyncio.Queue()

    def __len__(self) -> int:
        """Tasks not yet finished."""
        return len(self._pending)

    def add(self, key: K, task: asyncio.Task[T]) -> None:
        self._pending[key] = task
        task.add_done_callback(partial(self._finished, key))

    def _finished(self, key: K, task: asyncio.Task[T]) -> None:
        if self._pending.pop(key, None) is not None and not task.cancelled():
            self._done.put_nowait((key, task))

    async def next_batch(self) -> list[tuple[K, asyncio.Task[T]]]:
        """Wait for one finished task, then take every other one that has finished too."""
        batch = [await self._done.get()]
        while not self._done.empty():
            batch.append(self._done.get_nowait())
        return batch

    async def cancel_all(self) -> tuple[list[K], list[K]]:
        """Cancel every unfinished task and wait until all have unwound.

        Returns (cancelled keys, keys that had finished but were never taken by ``next_batch``).
        """
        tasks = list(self._pending.values())
        cancelled = [key for key, task in list(self._pending.items()) if task.cancel()]  # False: already done
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pending.clear()
        undelivered = []
        while not self._done.empty():
            key, task = self._done.get_nowait()
            task.exception()  # retrieved: a failure of a task nobody judged is not logged as never retrieved
            undelivered.append(key)
        return cancelled, undelivered


def results(batch: list[tuple[K, asyncio.Task[T]]]) -> list[T]:
    """Every task's result; if some raised (an output that could not be written), every exception is
    retrieved (asyncio logs none as never retrieved) and the first is raised."""
    errors = [task.exception() for _key, task in batch]
    for error in errors:
        if error is not None:
            raise error
    return [task.result() for _key, task in batch]
