"""The HTTP server, started for real on 127.0.0.1, driven by HttpEnvClient and raw httpx."""

from __future__ import annotations

import asyncio
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
