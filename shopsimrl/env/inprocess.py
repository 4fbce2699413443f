"""InProcessEnvClient: the embedded default, ShopSimEnv behind the async EnvClient interface.

Env calls run in worker threads so a search never stalls the caller's event
loop.  ``reset`` may block waiting for a slot, so it gets its own pool: waiting
resets can never take the threads that the steps and releases which free those
slots need.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.fingerprint import env_fingerprint
from shopsimrl.env.types import ResetResult, StepResult, Task

R = TypeVar("R")


class InProcessEnvClient:
    def __init__(self, env: ShopSimEnv, *, workers: int = 4, owns_env: bool = False,
                 slot_timeout: float | None = None) -> None:
        self.env = env
        self._owns_env = owns_env
        self._slot_timeout = slot_timeout
        self._ops = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="shopsim-op")
        self._resets = ThreadPoolExecutor(max_workers=max(2, env.slots), thread_name_prefix="shopsim-reset")
        self._closed = False
        self._fingerprint: dict[str, Any] | None = None

    async def _run(self, pool: ThreadPoolExecutor, fn: Callable[..., R], *args: object) -> R:
        if self._closed:
            raise RuntimeError("client is closed")
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def reset(self, task_id: str) -> ResetResult:
        """Start an episode; if the caller is cancelled meanwhile, the lease taken in the thread is released."""
        if self._closed:
            raise RuntimeError("client is closed")
        future = asyncio.get_running_loop().run_in_executor(
            self._resets, lambda: self.env.reset(task_id, timeout=self._slot_timeout)
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._release_orphan)
            raise

    def _release_orphan(self, future: asyncio.Future[ResetResult]) -> None:
        """A reset finished after its caller was cancelled: nobody will ever release that lease but us."""
        if future.cancelled() or future.exception() is not None:
            return
        lease_id = future.result().lease_id
        try:
            self.env.release(lease_id)
        except Exception:  # already reclaimed: nothing leaked
            pass

    async def step(self, lease_id: str, action: str) -> StepResult:
        return await self._run(self._ops, self.env.step, lease_id, action)

    async def terminate(self, lease_id: str, reason: str) -> StepResult:
        return await self._run(self._ops, self.env.terminate, lease_id, reason)

    async def release(self, lease_id: str) -> None:
        await self._run(self._ops, self.env.release, lease_id)

    async def list_tasks(self, split: str) -> list[str]:
        return self.env.list_tasks(split)

    async def get_task(self, task_id: str) -> Task:
        return self.env.get_task(task_id)

    async def healthz(self) -> dict[str, Any]:
        """What the server's ``/healthz`` answers for this env: the same keys, the same fingerprint."""
        if self._fingerprint is None:
            self._fingerprint = env_fingerprint(self.env)  # immutable for the env's life
        return {**self.env.health(), "fingerprint": self._fingerprint}

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_env:
            self.env.pool.close()  # wake resets waiting for a slot, so the pools drain quickly
        # Wait for calls already running: closing the catalog under a running search would crash SQLite.
        await asyncio.to_thread(self._ops.shutdown, True, cancel_futures=True)
        await asyncio.to_thread(self._resets.shutdown, self._owns_env, cancel_futures=True)
        if self._owns_env:
            self.env.close()

    async def __aenter__(self) -> InProcessEnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
