"""One stopped (SIGSTOP, not dead) env server among two: new resets go around it within 2 s; its own
episodes fail as technical (EnvUnavailableError) after the client timeout."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import httpx
import pytest
from faults.processes import EnvServer, wait_for

from shopsimrl.env.pool import EnvPool
from shopsimrl.env.types import EnvUnavailableError

CLIENT_TIMEOUT = 3.0


def test_new_resets_go_around_a_stopped_server_within_2_s(servers, fault_cache):
    healthy = EnvServer(fault_cache, "--slots", "48")
    stopped = EnvServer(fault_cache, "--slots", "48")
    servers.extend([healthy, stopped])
    starting = [threading.Thread(target=s.start) for s in (healthy, stopped)]  # both at once: half the wait
    for thread in starting:
        thread.start()
    for thread in starting:
        thread.join(timeout=90)
    assert healthy.health() is not None and stopped.health() is not None
    task = httpx.get(healthy.url + "/tasks", timeout=5).json()["task_ids"][0]

    async def scenario() -> None:
        async with EnvPool([healthy.url, stopped.url], timeout=CLIENT_TIMEOUT) as pool:
            first = [await pool.reset(task) for _ in range(2)]  # one on each server (most free slots first)
            on_stopped = [r for r in first if pool._leases[r.lease_id].url == stopped.url]
            assert len(on_stopped) == 1
            stopped.signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(2.0)
                sent = time.monotonic()
                later = [await asyncio.wait_for(pool.reset(task), CLIENT_TIMEOUT) for _ in range(10)]
                assert all(pool._leases[r.lease_id].url == healthy.url for r in later)
                assert time.monotonic() - sent < CLIENT_TIMEOUT
                started = time.monotonic()
                with pytest.raises(EnvUnavailableError):  # the episode already there fails as technical
                    await pool.step(on_stopped[0].lease_id, "search[anything]")
                assert CLIENT_TIMEOUT - 0.5 <= time.monotonic() - started < CLIENT_TIMEOUT * 3
                for result in [*later, *(r for r in first if r not in on_stopped)]:
                    await pool.release(result.lease_id)
            finally:
                stopped.signal(signal.SIGCONT)
            wait_for(lambda: stopped.health() is not None, 10, "the stopped server back")

    asyncio.run(scenario())
    assert healthy.leased() == 0
