"""Every env client passes the one EnvClient contract (shopsimrl.env.conformance.check_env_client).

The same check runs over the in-process client, the HTTP client against a real server on
127.0.0.1, the multi-server pool over two real servers, and the agent tests' fake shop;
and it names the deviation of a client that breaks the contract.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent.fakes import FakeEnv

from shopsimrl.env.conformance import EnvClientConformanceError, check_env_client
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.inprocess import InProcessEnvClient
from shopsimrl.env.pool import EnvPool
from shopsimrl.env.server import ServerThread
from shopsimrl.env.types import EnvClientWrapper, LeaseConflictError, StepResult


@pytest.fixture()
def servers(small_db: Path) -> Iterator[list[str]]:
    """Two env servers on 127.0.0.1 over the same catalog, stopped by the fixture whatever happens."""
    envs = [ShopSimEnv(small_db, slots=2, action_limit=30, reset_timeout=2.0) for _ in range(2)]
    threads: list[ServerThread] = []
    try:
        for env in envs:
            threads.append(ServerThread(env).start())
        yield [thread.url for thread in threads]
    finally:
        for thread in threads:
            thread.stop()
        for env in envs:
            env.close()


async def test_the_in_process_client_conforms(small_db: Path) -> None:
    client = InProcessEnvClient(ShopSimEnv(small_db, slots=2, action_limit=30, reset_timeout=2.0), owns_env=True)
    try:
        await check_env_client(client)
    finally:
        await client.aclose()


async def test_the_http_client_conforms(servers: list[str]) -> None:
    async with HttpEnvClient(servers[0], timeout=10) as client:
        await check_env_client(client)


async def test_the_multi_server_pool_conforms(servers: list[str]) -> None:
    async with EnvPool(servers, timeout=10, refresh_interval=0.05) as pool:
        await check_env_client(pool)


async def test_the_test_fake_conforms() -> None:
    await check_env_client(FakeEnv())


async def test_in_process_healthz_has_the_servers_keys(small_db: Path, servers: list[str]) -> None:
    client = InProcessEnvClient(ShopSimEnv(small_db, slots=2, action_limit=30, reset_timeout=2.0), owns_env=True)
    try:
        async with HttpEnvClient(servers[0], timeout=10) as http:
            local, remote = await client.healthz(), await http.healthz()
    finally:
        await client.aclose()
    assert set(local) == set(remote)
    assert local["fingerprint"] == remote["fingerprint"]  # same catalog, same action limit


class _ForgivingRelease(EnvClientWrapper):
    """Deviates: a second release of the same lease passes silently instead of raising."""

    async def release(self, lease_id: str) -> None:
        try:
            await self.inner.release(lease_id)
        except LeaseConflictError:
            pass


class _SilentFeedback(EnvClientWrapper):
    """Deviates: drops the feedback of invalid actions."""

    async def step(self, lease_id: str, action: str) -> StepResult:
        result = await self.inner.step(lease_id, action)
        return StepResult(result.observation, result.reward, result.terminated, result.truncated,
                          {**result.info, "feedback": None})


@pytest.mark.parametrize(
    ("wrapper", "message"),
    [
        (_ForgivingRelease, "release of a released lease: expected LeaseConflictError, got a result"),
        (_SilentFeedback, "step('hello'): feedback code None, expected 'invalid_format'"),
    ],
)
async def test_a_deviating_client_is_named_with_its_deviation(wrapper: type[EnvClientWrapper], message: str) -> None:
    with pytest.raises(EnvClientConformanceError) as caught:
        await check_env_client(wrapper(FakeEnv()))
    assert message in str(caught.value)
