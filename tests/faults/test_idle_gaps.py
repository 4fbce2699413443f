"""A policy that thinks just under 5 s per turn (uvicorn's and httpx's old idle-connection timeouts)."""

from __future__ import annotations

import asyncio

import pytest

from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.types import EnvError

TURN_SECONDS = 4.99


@pytest.mark.slow
async def test_64_episodes_of_5_turns_at_4_99_s_per_turn_lose_nothing(server):
    """About 30 s: every request reuses a connection idle for 4.99 s; none fails, no slot leaks."""
    failures: list[str] = []
    async with HttpEnvClient(server.url) as client:
        tasks = await client.list_tasks("train")

        async def episode(i: int) -> None:
            lease = None
            try:
                lease = (await client.reset(tasks[i])).lease_id
                for turn in range(5):
                    await asyncio.sleep(TURN_SECONDS)
                    result = await client.step(lease, "search[shoes]" if turn == 0 else "click[back to search]")
                    if result.terminated or result.truncated:
                        break
            except EnvError as exc:
                failures.append(f"episode {i}: {type(exc).__name__}: {exc}")
            finally:
                if lease is not None:
                    await client.release(lease)

        await asyncio.gather(*(episode(i) for i in range(64)))
    assert failures == []
    assert server.leased() == 0
