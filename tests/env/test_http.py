"""The HTTP server, started for real on 127.0.0.1, driven by HttpEnvClient and raw httpx."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.http_client import HttpEnvClient
from shopsimrl.env.server import ServerThread
from shopsimrl.env.types import (
    BadRequestError,
    EnvClient,
    EnvUnavailableError,
    EpisodeFinishedError,
    LeaseConflictError,
    NoFreeSlotError,
    QueryTooLongError,
    UnknownTaskError,
)


@pytest.fixture(scope="module")
def server(small_db: Path) -> Iterator[tuple[ShopSimEnv, str]]:
    env = ShopSimEnv(small_db, slots=3, reset_timeout=0.5)
    with ServerThread(env) as srv:
        yield env, srv.url
    env.close()


async def test_full_episode_over_http(server: tuple[ShopSimEnv, str]) -> None:
    env, url = server
    async with HttpEnvClient(url, timeout=10) as client:
        assert isinstance(client, EnvClient)
        train = await client.list_tasks("train")
        assert train == env.list_tasks("train")
        task = await client.get_task(train[0])
        assert task == env.get_task(train[0])
        start = await client.reset(train[0])
        assert start.task == task and start.observation.state["page"] == "search"
        assert start.observation.tools[0]["function"]["name"] == "search"
        result = await client.step(start.lease_id, f"search[{task.instruction}]")
        assert result.observation.state["page"] == "results" and result.reward is None
        bad = await client.step(start.lease_id, "click[nowhere]")
        assert bad.info["feedback"]["code"] == "unavailable_action"
        ended = await client.terminate(start.lease_id, "generation_length")
        assert ended.truncated and ended.reward == 0.0 and ended.info["end_reason"] == "generation_length"
        with pytest.raises(EpisodeFinishedError):
            await client.step(start.lease_id, "click[back to search]")
        await client.release(start.lease_id)
        with pytest.raises(LeaseConflictError):
            await client.release(start.lease_id)
        with pytest.raises(LeaseConflictError):
            await client.step(start.lease_id, "search[boots]")


async def test_healthz(server: tuple[ShopSimEnv, str]) -> None:
    env, url = server
    async with HttpEnvClient(url) as client:
        health = await client.healthz()
    assert health["ready"] is True and health["slots"] == 3 and health["free_slots"] == env.counters()["free_slots"]
    assert health["tasks"] == {"train": 160, "val": 20, "test": 20}
    assert health["versions"]["shopsimrl"] and health["versions"]["catalog"]["products"] == 2000
    assert {"seed", "schema_version"} <= set(health["versions"]["catalog"])


async def test_error_shapes_and_statuses(server: tuple[ShopSimEnv, str]) -> None:
    env, url = server
    task_id = env.list_tasks("train")[0]
    async with httpx.AsyncClient(base_url=url) as raw:
        r = await raw.post("/reset", json={"task_id": "nope"})
        assert r.status_code == 404 and r.json() == {"error": {"code": "unknown_task", "message": r.json()["error"]["message"]}}
        r = await raw.get("/tasks/nope")
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_task"
        r = await raw.post("/step", json={"lease_id": "x"})  # missing action
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
        assert "action" in r.json()["error"]["message"]
        r = await raw.post("/step", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and set(r.json()["error"]) == {"code", "message"}
        r = await raw.post("/step", json={"lease_id": "stale", "action": "search[x]"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "lease_conflict"
        r = await raw.get("/tasks", params={"split": "holdout"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
        r = await raw.get("/no/such/route")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        lease = (await raw.post("/reset", json={"task_id": task_id})).json()["lease_id"]
        r = await raw.post("/step", json={"lease_id": lease, "action": "search[" + "q" * 600 + "]"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "query_too_long"
        r = await raw.post("/terminate", json={"lease_id": lease, "reason": "action_limit"})
        assert r.status_code == 200 and r.json()["truncated"] is True
        r = await raw.post("/step", json={"lease_id": lease, "action": "search[x]"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "episode_finished"
        assert (await raw.post("/release", json={"lease_id": lease})).json() == {"released": True}


async def test_client_maps_errors_to_the_same_classes(server: tuple[ShopSimEnv, str]) -> None:
    env, url = server
    async with HttpEnvClient(url) as client:
        with pytest.raises(UnknownTaskError):
            await client.reset("nope")
        with pytest.raises(UnknownTaskError):
            await client.get_task("nope")
        with pytest.raises(BadRequestError):
            await client.list_tasks("holdout")
        start = await client.reset(env.list_tasks("val")[0])
        with pytest.raises(QueryTooLongError):
            await client.step(start.lease_id, "search[" + "q" * 513 + "]")
        with pytest.raises(BadRequestError):
            await client.terminate(start.lease_id, "bored")
        refused = await client.step(start.lease_id, "click[" + "x" * 9000 + "]")  # the model's mistake: feedback
        assert refused.info["feedback"]["code"] == "invalid_format" and not refused.done
        await client.release(start.lease_id)


async def test_no_free_slot_is_503_and_does_not_block_the_server(server: tuple[ShopSimEnv, str]) -> None:
    env, url = server
    task_id = env.list_tasks("train")[1]
    async with HttpEnvClient(url, slot_timeout=0.5) as client:
        leases = [(await client.reset(task_id)).lease_id for _ in range(3)]
        waiting = asyncio.create_task(client.reset(task_id))
        await asyncio.sleep(0.1)
        health = await client.healthz()  # answered while a reset waits for a slot
        assert health["free_slots"] == 0
        with pytest.raises(NoFreeSlotError):
            await waiting
        async with httpx.AsyncClient(base_url=url) as raw:
            r = await raw.post("/reset", json={"task_id": task_id, "timeout": 0})
            assert r.status_code == 503 and r.json()["error"]["code"] == "no_free_slot"
        waiting = asyncio.create_task(client.reset(task_id))
        await asyncio.sleep(0.1)
        await client.release(leases[0])  # frees a slot for the waiting reset
        got = await waiting
        for lease in [got.lease_id, *leases[1:]]:
            await client.release(lease)
    assert env.counters()["free_slots"] == 3


async def test_unreachable_server_is_env_unavailable_after_retries() -> None:
    attempts = 0

    def refuse(request: httpx.Request) -> httpx.Response:
        nonlocal attempts
        attempts += 1
        raise httpx.ConnectError("refused", request=request)

    client = HttpEnvClient("http://127.0.0.1:9", connect_retries=2, retry_backoff=0.01,
                           transport=httpx.MockTransport(refuse))
    with pytest.raises(EnvUnavailableError):
        await client.list_tasks("train")
    assert attempts == 3
    await client.aclose()


async def test_read_timeouts_are_not_retried() -> None:
    attempts = 0

    def slow(request: httpx.Request) -> httpx.Response:
        nonlocal attempts
        attempts += 1
        raise httpx.ReadTimeout("slow", request=request)

    client = HttpEnvClient("http://127.0.0.1:9", transport=httpx.MockTransport(slow))
    with pytest.raises(EnvUnavailableError):
        await client.step("lease", "search[x]")
    assert attempts == 1
    await client.aclose()


class _ReplyLost(httpx.AsyncBaseTransport):
    """Forwards to the real server, then drops the reply of the first ``lose`` requests to ``path``:
    the server has acted on them, the client sees a broken connection."""

    def __init__(self, path: str, lose: int = 1) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.path = path
        self.lose = lose
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path == self.path:
            self.sent += 1
            if self.lose:
                self.lose -= 1
                await response.aread()
                await response.aclose()
                raise httpx.ReadError("connection reset before the reply", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_step_whose_reply_was_lost_is_retried_without_being_applied_twice(
        server: tuple[ShopSimEnv, str]) -> None:
    env, url = server
    task = env.list_tasks("train")[2]
    transport = _ReplyLost("/step")
    async with HttpEnvClient(url, transport=transport, retry_backoff=0.01) as client:
        start = await client.reset(task)
        steps_before = env.counters()["steps"]
        result = await client.step(start.lease_id, "search[red boots]")
        assert transport.sent == 2  # the first attempt reached the server, its reply was lost
        assert env.counters()["steps"] == steps_before + 1  # ... and the retry was answered, not applied
        assert result.info["steps"] == 1
        await client.release(start.lease_id)


async def test_a_release_whose_reply_was_lost_counts_as_released(server: tuple[ShopSimEnv, str]) -> None:
    env, url = server
    transport = _ReplyLost("/release")
    async with HttpEnvClient(url, transport=transport, retry_backoff=0.01) as client:
        start = await client.reset(env.list_tasks("train")[3])
        await client.release(start.lease_id)  # the retry gets 409 "gone": released, not an error
        assert transport.sent == 2
        with pytest.raises(LeaseConflictError):  # a stale lease on the first attempt is still the caller's bug
            await client.release(start.lease_id)
    assert env.counters()["leased"] == 0


async def test_a_release_retries_until_the_server_answers() -> None:
    calls = 0

    def flaky(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx.ReadTimeout("server stalled", request=request)
        return httpx.Response(200, json={"released": True})

    async with HttpEnvClient("http://127.0.0.1:9", transport=httpx.MockTransport(flaky),
                             retry_backoff=0.01) as client:
        await client.release("lease")
    assert calls == 3


async def test_an_abandoned_reset_never_takes_a_slot(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=1, reset_timeout=5.0)
    with ServerThread(env) as srv:
        task = env.list_tasks("train")[0]
        async with HttpEnvClient(srv.url) as holder, httpx.AsyncClient(base_url=srv.url) as raw:
            held = await holder.reset(task)
            with pytest.raises(httpx.ReadTimeout):  # the server would wait 5 s for a slot; we leave after 0.3 s
                await raw.post("/reset", json={"task_id": task, "timeout": 5.0}, timeout=0.3)
            await holder.release(held.lease_id)
            for _ in range(100):  # the slot stays free: the abandoned reset gave up its wait
                await asyncio.sleep(0.02)
                assert env.counters()["leased"] == 0
            again = await holder.reset(task)
            await holder.release(again.lease_id)
    env.close()


def _raw_http(url: str, data: bytes, *, read_timeout: float = 5.0) -> bytes:
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=read_timeout) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # the server answered and closed mid-body
            pass
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def test_an_oversized_body_is_refused_413_from_its_length_before_it_is_read(server: tuple[ShopSimEnv, str]) -> None:
    _env, url = server
    head = (b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200000000\r\n\r\n")
    reply = _raw_http(url, head + b"{")  # 200 MB announced, one byte sent: answered at once
    assert reply.startswith(b"HTTP/1.1 413") and b"body_too_large" in reply


def test_an_oversized_chunked_body_is_cut_off_at_the_limit(server: tuple[ShopSimEnv, str]) -> None:
    _env, url = server
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"  # 64 KiB chunks, no Content-Length
    head = b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    reply = _raw_http(url, head + chunk * 20)  # 1.25 MiB: refused once the limit is crossed
    assert reply.startswith(b"HTTP/1.1 413") and b"body_too_large" in reply


async def test_oversized_headers_are_refused_431(server: tuple[ShopSimEnv, str]) -> None:
    _env, url = server
    async with httpx.AsyncClient(base_url=url) as raw:
        r = await raw.get("/healthz", headers={"x-big": "a" * (128 << 10)})
    assert r.status_code == 431 and r.json()["error"]["code"] == "headers_too_large"


def test_a_body_that_never_arrives_is_refused_408(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=1)
    with ServerThread(env, body_timeout=0.3) as srv:
        head = b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        reply = _raw_http(srv.url, head + b'{"lease_id"')  # 11 of 100 bytes, then silence
        assert reply.startswith(b"HTTP/1.1 408") and b"body_timeout" in reply
    env.close()


def test_a_head_that_never_completes_is_refused_408_and_closed(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=1)
    with ServerThread(env, head_timeout=0.5) as srv:
        started = time.monotonic()
        reply = _raw_http(srv.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Half: ")  # half a header, then silence
        assert reply.startswith(b"HTTP/1.1 408") and b"head_timeout" in reply
        assert _raw_http(srv.url, b"").startswith(b"HTTP/1.1 408")  # a connection that never says anything
        assert time.monotonic() - started < 4
        # a kept-alive connection idle after a reply is not cut by the head deadline (the keep-alive covers it)
        host, port = srv.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            for _ in range(2):
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert conn.recv(65536).startswith(b"HTTP/1.1 200")
                time.sleep(1.0)  # twice the head deadline, idle between requests
    env.close()


def test_endless_headers_are_cut_off_while_they_arrive(server: tuple[ShopSimEnv, str]) -> None:
    _env, url = server
    reply = _raw_http(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (8 << 20))  # never ends
    assert reply.startswith(b"HTTP/1.1 431") and b"headers_too_large" in reply


async def test_an_idle_lease_is_reclaimed_after_the_ttl(small_db: Path) -> None:
    env = ShopSimEnv(small_db, slots=2, idle_timeout=0.3)
    with ServerThread(env) as srv:
        async with HttpEnvClient(srv.url) as client:
            start = await client.reset(env.list_tasks("train")[0])
            assert (await client.healthz())["leased"] == 1
            await asyncio.sleep(0.5)  # the client vanished: nobody steps or releases
            health = await client.healthz()
            assert health["leased"] == 0 and health["free_slots"] == 2
            with pytest.raises(LeaseConflictError):
                await client.step(start.lease_id, "search[x]")
            assert env.counters()["expired"] == 1
    env.close()


async def test_release_to_a_server_that_is_not_listening_gives_up_after_the_connect_retries() -> None:
    """A refused connection means the server's process, and the leases it held in memory, are gone:
    the release stops after the connect retries instead of retrying until its (here, hour-long) deadline."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on once this socket closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = HttpEnvClient(f"http://127.0.0.1:{port}", release_deadline=3600.0, retry_backoff=0.01)
    try:
        with pytest.raises(EnvUnavailableError, match="the server is not listening"):
            await asyncio.wait_for(client.release("lease-on-a-dead-server"), timeout=60)
        assert client.unconfirmed_releases == 1
    finally:
        await client.aclose()
