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
from typing import TypeVar

from shopsimrl.env.core import ShopSimEnv
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

    async def _run(self, pool: ThreadPoolExecutor, fn: Callable[..., R], *args: object) -> R:
        if self._closed:
            raise RuntimeError("client is closed")
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def reset(self, task_id: str) -> ResetResult:
        return await self._run(self._resets, lambda: self.env.reset(task_id, timeout=self._slot_timeout))

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

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ops.shutdown(wait=False, cancel_futures=True)
        self._resets.shutdown(wait=False, cancel_futures=True)
        if self._owns_env:
            self.env.close()

    async def __aenter__(self) -> InProcessEnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
