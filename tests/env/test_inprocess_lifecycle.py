"""The in-process client never leaks a slot on cancellation and closes without crashing SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.inprocess import InProcessEnvClient
from shopsimrl.env.types import EnvError


async def test_a_reset_cancelled_while_waiting_for_a_slot_leaks_no_lease(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=1, reset_timeout=5.0)
    client = InProcessEnvClient(env)
    task = env.list_tasks("train")[0]
    holder = await client.reset(task)
    waiting = asyncio.create_task(client.reset(task))  # blocks in its thread: no free slot
    await asyncio.sleep(0.1)
    waiting.cancel()
    await client.release(holder.lease_id)  # the waiting thread now gets the slot, for nobody
    with pytest.raises(asyncio.CancelledError):
        await waiting
    for _ in range(100):
        if env.pool.counters()["leased"] == 0:
            break
        await asyncio.sleep(0.02)
    assert env.pool.counters() == {"slots": 1, "free_slots": 1, "leased": 0, "expired": 0}
    await client.aclose()
    env.close()


async def test_closing_an_owning_client_waits_for_running_calls_and_wakes_waiting_resets(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=2, reset_timeout=30.0)
    client = InProcessEnvClient(env, owns_env=True)
    task = env.list_tasks("train")[0]
    leases = [await client.reset(task) for _ in range(2)]
    steps = [asyncio.create_task(client.step(r.lease_id, f"search[{word} shoes {i}]"))
             for i, r in enumerate(leases) for word in ("red", "blue", "green")]
    waiting = asyncio.create_task(client.reset(task))  # would wait 30 s for a slot
    await asyncio.sleep(0.05)
    started = asyncio.get_running_loop().time()
    await client.aclose()
    assert asyncio.get_running_loop().time() - started < 10  # the waiting reset was woken, not waited out
    with pytest.raises(EnvError, match="closing"):
        await waiting
    await asyncio.gather(*steps, return_exceptions=True)  # no crash: every running search finished first


def test_an_over_long_search_where_search_is_unavailable_is_feedback_not_an_error(small_db: Path) -> None:
    with ShopSimEnv(small_db, slots=1) as env:
        reset = env.reset(env.list_tasks("train")[0])
        env.step(reset.lease_id, "search[shoes]")
        result = env.step(reset.lease_id, "search[" + "x" * 600 + "]")
        assert result.info["feedback"]["code"] == "search_unavailable"
