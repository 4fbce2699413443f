"""InProcessEnvClient: the same interface, no server; slot waits never block the event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.inprocess import InProcessEnvClient
from shopsimrl.env.types import EnvClient, LeaseConflictError, NoFreeSlotError, UnknownTaskError


async def test_episode_through_the_in_process_client(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=2)
    async with InProcessEnvClient(env, owns_env=True) as client:
        assert isinstance(client, EnvClient)
        task_id = (await client.list_tasks("test"))[0]
        assert (await client.get_task(task_id)).split == "test"
        start = await client.reset(task_id)
        result = await client.step(start.lease_id, "search[black]")
        assert result.observation.state["page"] == "results"
        ended = await client.terminate(start.lease_id, "action_limit")
        assert ended.truncated and ended.reward == 0.0
        await client.release(start.lease_id)
        with pytest.raises(LeaseConflictError):
            await client.release(start.lease_id)
        with pytest.raises(UnknownTaskError):
            await client.reset("missing")


async def test_waiting_resets_do_not_starve_steps(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=2, reset_timeout=5.0)
    async with InProcessEnvClient(env, workers=1, owns_env=True) as client:
        task_id = (await client.list_tasks("train"))[0]
        first = [await client.reset(task_id) for _ in range(2)]
        waiters = [asyncio.create_task(client.reset(task_id)) for _ in range(4)]
        await asyncio.sleep(0.05)
        # the loop stays responsive and steps still run while four resets wait
        result = await asyncio.wait_for(client.step(first[0].lease_id, "search[boots]"), timeout=2)
        assert result.observation.state["page"] == "results"
        await client.release(first[0].lease_id)
        await client.release(first[1].lease_id)
        done, pending = await asyncio.wait(waiters, timeout=3)
        assert len(done) == 2 and len(pending) == 2
        for task in done:
            await client.release(task.result().lease_id)
        more = await asyncio.wait(pending, timeout=3)
        assert len(more[0]) == 2
        for task in more[0]:
            await client.release(task.result().lease_id)


async def test_reset_timeout_raises_no_free_slot(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=1, reset_timeout=0.2)
    async with InProcessEnvClient(env, owns_env=True) as client:
        task_id = (await client.list_tasks("train"))[0]
        await client.reset(task_id)
        with pytest.raises(NoFreeSlotError):
            await client.reset(task_id)
