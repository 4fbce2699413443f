"""EnvPool over real env servers on 127.0.0.1: placement, the gate, binding, failure, fingerprints, tokens."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from catalogs import SMALL_PRODUCTS, SMALL_SEED
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shopsimrl.env.build import build_catalog
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.pool import EnvPool, FingerprintMismatchError, make_env_client, parse_env_urls
from shopsimrl.env.server import ServerThread
from shopsimrl.env.types import (
    EnvClient,
    EnvError,
    EnvUnavailableError,
    LeaseConflictError,
    NoFreeSlotError,
)

pytestmark = pytest.mark.slow  # real env servers: with -n this file starts first

TOKEN = "pool-test-token-0123456789"
FAST = {"refresh_interval": 0.05, "backoff": 0.05, "max_backoff": 0.2}


def fast_client(token: str | None = None):  # type: ignore[no-untyped-def]
    return lambda url: HttpEnvClient(url, timeout=5, connect_retries=0, shards=2, token=token)


class Shop:
    """One env and its server thread, stoppable and restartable on the same port."""

    def __init__(self, db: Path, *, slots: int = 2, action_limit: int = 30, token: str | None = None) -> None:
        self.env = ShopSimEnv(db, slots=slots, action_limit=action_limit, reset_timeout=0.5)
        self.token = token
        self.server = ServerThread(self.env, token=token).start()
        self.port = self.server.port
        self.url = self.server.url

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        self.server = ServerThread(self.env, port=self.port, token=self.token).start()

    def close(self) -> None:
        self.server.stop()
        self.env.close()


@pytest.fixture()
def two(small_db: Path) -> Iterator[tuple[Shop, Shop]]:
    a, b = Shop(small_db), Shop(small_db)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_parse_env_urls() -> None:
    assert parse_env_urls(" http://a:1/, https://b:2 ,") == ["http://a:1", "https://b:2"]
    assert parse_env_urls(["http://a:1"]) == ["http://a:1"]
    for bad, fragment in (("", "no env server"), ("ftp://a", "not an http"), ("http://a:1,http://a:1/", "twice"),
                          ("a:1", "not an http")):
        with pytest.raises(ValueError, match=fragment):
            parse_env_urls(bad)


async def test_one_url_is_a_plain_client_several_a_pool() -> None:
    single = make_env_client("http://127.0.0.1:9", shards=2)
    pool = make_env_client("http://127.0.0.1:9,http://127.0.0.1:10")
    assert isinstance(single, HttpEnvClient) and isinstance(pool, EnvPool) and isinstance(pool, EnvClient)
    await single.aclose()
    await pool.aclose()


async def test_resets_go_to_the_server_with_most_free_slots_and_leases_stay_bound(two: tuple[Shop, Shop]) -> None:
    a, b = two
    task = a.env.list_tasks("train")[0]
    async with EnvPool([a.url, b.url], client_factory=fast_client(), **FAST) as pool:
        assert (await pool.healthz())["slots"] == 4
        first = await pool.reset(task)
        second = await pool.reset(task)
        assert a.env.counters()["leased"] == 1 and b.env.counters()["leased"] == 1  # spread, not stacked
        third = await pool.reset(task)
        fourth = await pool.reset(task)
        assert a.env.counters()["leased"] == 2 and b.env.counters()["leased"] == 2
        for start in (first, second, third, fourth):
            before = a.env.counters()["steps"] + b.env.counters()["steps"]
            await pool.step(start.lease_id, "search[boots]")
            assert a.env.counters()["steps"] + b.env.counters()["steps"] == before + 1
        # each step went to the lease's own server: any other would have answered 409 lease_conflict
        for start in (first, second, third, fourth):
            await pool.release(start.lease_id)
        with pytest.raises(LeaseConflictError):
            await pool.release(first.lease_id)
        with pytest.raises(LeaseConflictError):
            await pool.step("never-issued", "search[x]")
        assert pool.leases == 0
        assert a.env.counters()["leased"] == 0 and b.env.counters()["leased"] == 0
        assert sorted(s["episodes"] for s in pool.status()) == [2, 2]


async def test_the_gate_is_the_sum_of_free_slots(two: tuple[Shop, Shop]) -> None:
    a, b = two
    task = a.env.list_tasks("train")[0]
    async with EnvPool([a.url, b.url], client_factory=fast_client(), slot_timeout=0.3, **FAST) as pool:
        held = [await pool.reset(task) for _ in range(4)]
        resets = a.env.counters()["resets"] + b.env.counters()["resets"]
        with pytest.raises(NoFreeSlotError, match="all 4 slots"):
            await pool.reset(task)
        assert a.env.counters()["resets"] + b.env.counters()["resets"] == resets  # waited in the pool, sent nothing
        waiting = asyncio.create_task(pool.reset(task))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await pool.release(held[0].lease_id)  # a release opens the gate at once
        fifth = await asyncio.wait_for(waiting, 5)
        for start in (*held[1:], fifth):
            await pool.release(start.lease_id)
        assert a.env.counters()["leased"] + b.env.counters()["leased"] == 0


async def test_a_dead_server_fails_only_its_episodes_and_comes_back_after_a_backoff(two: tuple[Shop, Shop]) -> None:
    a, b = two
    task = a.env.list_tasks("train")[0]
    async with EnvPool([a.url, b.url], client_factory=fast_client(), **FAST) as pool:
        on = {}
        for _ in range(2):
            start = await pool.reset(task)
            on["a" if start.lease_id in a.env.pool._leases else "b"] = start
        assert set(on) == {"a", "b"}
        b.stop()
        with pytest.raises(EnvUnavailableError):
            await pool.step(on["b"].lease_id, "search[boots]")
        assert (await pool.step(on["a"].lease_id, "search[boots]")).observation.state["page"] == "results"
        with pytest.raises(EnvUnavailableError):
            await pool.release(on["b"].lease_id)  # the pool forgets it anyway: no slot of ours stays held
        assert pool.leases == 1 and [s["up"] for s in pool.status()] == [True, False]
        again = await pool.reset(task)  # goes to the server that is up
        assert again.lease_id in a.env.pool._leases
        await pool.release(again.lease_id)
        b.restart()
        deadline = time.monotonic() + 10
        while not pool.status()[1]["up"]:
            assert time.monotonic() < deadline, pool.status()
            await asyncio.sleep(0.05)
        await pool.release(on["a"].lease_id)
        b.env.release(on["b"].lease_id)  # the server kept the orphan slot across its restart (same env object)


async def test_a_reset_refused_at_connect_goes_to_another_server(two: tuple[Shop, Shop]) -> None:
    a, b = two
    task = a.env.list_tasks("train")[0]
    async with EnvPool([a.url, b.url], client_factory=fast_client(), refresh_interval=30.0) as pool:
        first = await pool.reset(task)
        dead, alive = (b, a) if first.lease_id in a.env.pool._leases else (a, b)
        dead.stop()  # the pool has not noticed: the next reset picks the dead one (most free slots)
        second = await pool.reset(task)
        assert second.lease_id in alive.env.pool._leases
        assert [s["up"] for s in pool.status()] == [dead is b, dead is a]
        for start in (first, second):
            try:
                await pool.release(start.lease_id)
            except EnvUnavailableError:
                pass


async def test_no_server_up_is_an_env_unavailable_error(two: tuple[Shop, Shop]) -> None:
    a, b = two
    async with EnvPool([a.url, b.url], client_factory=fast_client(), **FAST) as pool:
        a.stop()
        b.stop()
        with pytest.raises(EnvUnavailableError, match="no env server is up"):
            await pool.reset(a.env.list_tasks("train")[0])


async def test_a_server_that_does_not_answer_at_start_is_named(two: tuple[Shop, Shop]) -> None:
    a, _ = two
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    pool = EnvPool([a.url, dead], client_factory=fast_client())
    with pytest.raises(EnvUnavailableError, match=dead):
        await pool.start()
    await pool.aclose()


@pytest.mark.parametrize("other", ["action_limit", "catalog"])
async def test_servers_of_another_shop_are_refused_naming_the_server(small_db: Path, catalog_cache: Path,
                                                                     other: str) -> None:
    a = Shop(small_db)
    if other == "action_limit":
        b = Shop(small_db, action_limit=10)
    else:
        b = Shop(build_catalog(SMALL_PRODUCTS, SMALL_SEED, catalog_cache, tasks=40))
    try:
        pool = EnvPool([a.url, b.url], client_factory=fast_client())
        with pytest.raises(FingerprintMismatchError) as info:
            await pool.start()
        await pool.aclose()
        message = str(info.value)
        assert b.url in message and f"than {a.url}" in message
        assert ("action_limit 30 vs 10" in message) if other == "action_limit" else ("tasks 200 vs 40" in message)
    finally:
        a.close()
        b.close()


async def test_a_wrong_or_missing_token_is_refused_at_start(small_db: Path) -> None:
    a, b = Shop(small_db, token=TOKEN), Shop(small_db, token=TOKEN)
    try:
        for token, what in ((None, "no token"), ("wrong-token-0123456789", "a wrong token")):
            pool = EnvPool([a.url, b.url], token=token, client_factory=fast_client(token))
            with pytest.raises(EnvError) as info:
                await pool.start()
            await pool.aclose()
            assert info.value.code == "unauthorized" and what in str(info.value) and a.url in str(info.value)
        async with EnvPool([a.url, b.url], token=TOKEN, client_factory=fast_client(TOKEN), **FAST) as pool:
            start = await pool.reset(a.env.list_tasks("train")[0])
            await pool.step(start.lease_id, "search[boots]")
            await pool.release(start.lease_id)
    finally:
        a.close()
        b.close()


OPS = st.lists(st.sampled_from(["reset", "step", "release", "stale"]), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_lease_accounting_stays_exact(two: tuple[Shop, Shop], ops: list[str]) -> None:
    """Any sequence of resets, steps and releases: our count per server equals its leases, placement stays even."""
    a, b = two
    task = a.env.list_tasks("train")[0]

    async def play() -> None:
        async with EnvPool([a.url, b.url], client_factory=fast_client(), slot_timeout=0.2, **FAST) as pool:
            held: list[str] = []
            released: list[str] = []
            for i, op in enumerate(ops):
                if op == "reset":
                    if len(held) == 4:
                        with pytest.raises(NoFreeSlotError):
                            await pool.reset(task)
                    else:
                        free = [s["free"] for s in pool.status()]
                        lease = (await pool.reset(task)).lease_id
                        held.append(lease)
                        chosen = 0 if lease in a.env.pool._leases else 1
                        assert free[chosen] == max(free)  # the server with the most free slots
                elif op == "step" and held:
                    await pool.step(held[i % len(held)], "search[boots]")
                elif op == "release" and held:
                    lease = held.pop(i % len(held))
                    await pool.release(lease)
                    released.append(lease)
                elif op == "stale" and released:
                    with pytest.raises(LeaseConflictError):
                        await pool.step(released[-1], "search[boots]")
                status = pool.status()
                assert [s["ours"] for s in status] == [a.env.counters()["leased"], b.env.counters()["leased"]]
                assert pool.leases == len(held)
            for lease in held:
                await pool.release(lease)
        assert a.env.counters()["leased"] == 0 and b.env.counters()["leased"] == 0

    asyncio.run(play())


async def test_slow_health_answers_do_not_take_a_busy_server_out_at_once(two: tuple[Shop, Shop]) -> None:
    import httpx

    a, b = two
    behaviour = {"b": "ok"}

    async def probe(request: httpx.Request) -> httpx.Response:
        if request.url.port == b.port and behaviour["b"] != "ok":
            exc = httpx.ReadTimeout if behaviour["b"] == "slow" else httpx.ConnectError
            raise exc("simulated", request=request)
        async with httpx.AsyncClient() as real:
            return await real.get(str(request.url))

    async with EnvPool([a.url, b.url], client_factory=fast_client(), refresh_interval=3600) as pool:
        await pool._health.probe.aclose()
        pool._health.probe = httpx.AsyncClient(transport=httpx.MockTransport(probe))
        behaviour["b"] = "slow"
        for _ in range(2):
            await pool.refresh()
            assert pool.status()[1]["up"]  # busy, not dead
        await pool.refresh()
        assert not pool.status()[1]["up"]  # three slow answers in a row: out of placement
        behaviour["b"] = "ok"
        pool._servers[1].retry_at = 0.0
        await pool.refresh()
        assert pool.status()[1]["up"]
        behaviour["b"] = "refused"
        await pool.refresh()
        assert not pool.status()[1]["up"]  # a refused connection: out at once


ROLLOUT_ARGS = ["--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--over-sampling-batch-size", "2",
                "--global-batch-size", "4", "--view", "plain"]


def test_rollout_refuses_a_mix_of_shops_or_a_missing_token(small_db: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from shopsimrl.commands import rollout as cli

    a, other = Shop(small_db), Shop(small_db, action_limit=10)
    guarded = Shop(small_db, token=TOKEN)
    try:
        code = cli.main([*ROLLOUT_ARGS, "--env", f"{a.url},{other.url}", "--out", str(tmp_path), "--name", "mix"])
        err = capsys.readouterr().err
        assert code == 2 and f"env server {other.url} serves another shop than {a.url}" in err, err
        code = cli.main([*ROLLOUT_ARGS, "--env", f"{a.url},{guarded.url}", "--out", str(tmp_path), "--name", "tok"])
        err = capsys.readouterr().err
        assert code == 2 and f"env server {guarded.url} refuses no token" in err, err
        code = cli.main([*ROLLOUT_ARGS, "--env", guarded.url, "--out", str(tmp_path), "--name", "tok1"])
        err = capsys.readouterr().err
        assert code == 2 and "unauthorized" in err, err
        assert not any((tmp_path / name).exists() for name in ("mix", "tok", "tok1"))
        assert a.env.counters()["resets"] == other.env.counters()["resets"] == guarded.env.counters()["resets"] == 0
    finally:
        a.close()
        other.close()
        guarded.close()


def test_rollout_over_two_servers_with_a_token(small_db: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from shopsimrl.commands import rollout as cli

    token_file = tmp_path / "env.token"
    token_file.write_text(TOKEN)
    a, b = Shop(small_db, slots=3, token=TOKEN), Shop(small_db, slots=3, token=TOKEN)
    try:
        code = cli.main([*ROLLOUT_ARGS, "--env", f"{a.url},{b.url}", "--env-token-file", str(token_file),
                         "--episode-concurrency", "16", "--out", str(tmp_path), "--name", "two"])
        err = capsys.readouterr().err
        assert code == 0, err
        assert "the 2 env servers have 6 free slots of 6: running at most 6 episodes at once" in err
        assert a.env.counters()["resets"] > 0 and b.env.counters()["resets"] > 0  # both served episodes
        assert a.env.counters()["leased"] == b.env.counters()["leased"] == 0
    finally:
        a.close()
        b.close()


async def test_a_call_broken_mid_way_fails_alone_and_health_decides(two: tuple[Shop, Shop]) -> None:
    import httpx

    a, b = two
    async with EnvPool([a.url, b.url], client_factory=fast_client(), refresh_interval=3600) as pool:
        live, dead = pool._servers
        broken = EnvUnavailableError("POST /step failed: ReadError")
        broken.__cause__ = httpx.ReadError("reset by peer")
        pool._health.failed(live, broken)  # a keep-alive race or an overloaded server: /healthz answers
        assert live.check is not None
        await live.check
        assert live.up
        b.stop()
        pool._health.failed(dead, broken)  # the same failure on a server that is gone: /healthz is refused
        assert dead.check is not None
        await dead.check
        assert not dead.up
        b.restart()
        dead.retry_at = 0.0
        await pool.refresh()
        assert dead.up
        refused = EnvUnavailableError("cannot reach")
        refused.__cause__ = httpx.ConnectError("refused")
        pool._health.failed(dead, refused)  # a refused connection: out at once, no check needed
        assert not dead.up


async def test_a_release_broken_mid_way_is_repeated_so_no_slot_leaks(two: tuple[Shop, Shop]) -> None:
    import httpx

    a, b = two
    drop = {"release": 0, "landed": False}

    async def handler(request: httpx.Request) -> httpx.Response:
        async with httpx.AsyncClient() as real:
            forwarded = await real.request(request.method, str(request.url), content=request.content,
                                           headers={"content-type": "application/json"})
        if request.url.path == "/release" and drop["release"] > 0:
            drop["release"] -= 1  # the release landed, but its answer is lost
            drop["landed"] = True
            raise httpx.ReadError("connection reset", request=request)
        return forwarded

    factory = lambda url: HttpEnvClient(url, timeout=5, connect_retries=0,  # noqa: E731
                                        transport=httpx.MockTransport(handler))
    task = a.env.list_tasks("train")[0]
    async with EnvPool([a.url, b.url], client_factory=factory, **FAST) as pool:
        start = await pool.reset(task)
        drop["release"] = 1
        await pool.release(start.lease_id)  # the repeat answers 409: the first one had landed
        assert drop["landed"] and pool.leases == 0
        assert a.env.counters()["leased"] == b.env.counters()["leased"] == 0
