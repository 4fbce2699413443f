"""Slots and leases: conflicts, exhaustion with a timeout, no leaked slots, terminate."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.sessions import SlotPool
from shopsimrl.env.types import (
    BadRequestError,
    EpisodeFinishedError,
    LeaseConflictError,
    NoFreeSlotError,
    UnknownTaskError,
)

from .conftest import first_task


def test_lease_ids_are_unguessable_and_counters_move(env: ShopSimEnv) -> None:
    task = first_task(env)
    a, b = env.reset(task), env.reset(task)
    assert a.lease_id != b.lease_id and len(a.lease_id) >= 32
    assert env.counters()["leased"] == 2 and env.counters()["free_slots"] == 2
    env.release(a.lease_id)
    env.release(b.lease_id)
    assert env.counters()["free_slots"] == 4 and env.counters()["leased"] == 0


def test_wrong_or_stale_lease_is_a_conflict(env: ShopSimEnv) -> None:
    start = env.reset(first_task(env))
    with pytest.raises(LeaseConflictError):
        env.step("not-a-lease", "search[boots]")
    with pytest.raises(LeaseConflictError):
        env.terminate("not-a-lease", "action_limit")
    env.release(start.lease_id)
    with pytest.raises(LeaseConflictError):
        env.step(start.lease_id, "search[boots]")
    with pytest.raises(LeaseConflictError):
        env.release(start.lease_id)  # a second release is a conflict...


def test_stale_release_never_frees_someone_elses_slot(small_db: Path) -> None:
    with ShopSimEnv(small_db, slots=1, reset_timeout=0.2) as shop:
        task = first_task(shop)
        old = shop.reset(task)
        shop.release(old.lease_id)
        new = shop.reset(task)  # reuses the only slot
        with pytest.raises(LeaseConflictError):
            shop.release(old.lease_id)
        assert shop.counters()["leased"] == 1
        assert shop.step(new.lease_id, "search[boots]").observation.state["page"] == "results"
        with pytest.raises(NoFreeSlotError):
            shop.reset(task)


def test_slot_exhaustion_waits_then_times_out(small_db: Path) -> None:
    with ShopSimEnv(small_db, slots=2, reset_timeout=0.3) as shop:
        task = first_task(shop)
        leases = [shop.reset(task).lease_id for _ in range(2)]
        started = time.monotonic()
        with pytest.raises(NoFreeSlotError):
            shop.reset(task)
        assert 0.25 <= time.monotonic() - started < 2.0
        # a waiting reset gets the slot as soon as one is released
        timer = threading.Timer(0.2, shop.release, args=(leases[0],))
        timer.start()
        got = shop.reset(task, timeout=5.0)
        timer.join()
        assert got.lease_id not in leases and shop.counters()["free_slots"] == 0


def test_failed_reset_does_not_leak_its_slot(small_db: Path) -> None:
    with ShopSimEnv(small_db, slots=1, reset_timeout=0.1) as shop:
        for _ in range(3):
            with pytest.raises(UnknownTaskError):
                shop.reset("no-such-task")
        assert shop.counters()["free_slots"] == 1
        lease = shop.reset(first_task(shop)).lease_id
        shop.release(lease)


def test_stepping_a_finished_episode(env: ShopSimEnv) -> None:
    lease = env.reset(first_task(env)).lease_id
    env.step(lease, "search[boots]")
    ended = env.terminate(lease, "generation_length")
    assert ended.truncated and not ended.terminated and ended.reward == 0.0
    assert ended.info["end_reason"] == "generation_length"
    detail = ended.info["reward_detail"]
    assert detail["reward"] == 0.0 and detail["r_success"] == 0.0 and detail["end_reason"] == "generation_length"
    assert ended.observation.state["page"] == "done"
    with pytest.raises(EpisodeFinishedError):
        env.step(lease, "click[back to search]")
    with pytest.raises(EpisodeFinishedError):
        env.terminate(lease, "action_limit")
    env.release(lease)  # a finished episode still holds its slot until released
    assert env.counters()["leased"] == 0


def test_terminate_rejects_unknown_reasons(env: ShopSimEnv) -> None:
    lease = env.reset(first_task(env)).lease_id
    with pytest.raises(BadRequestError):
        env.terminate(lease, "bored")
    assert env.terminate(lease, "action_limit").info["end_reason"] == "action_limit"


def test_idle_leases_are_reclaimed_when_a_slot_is_needed() -> None:
    pool: SlotPool[str] = SlotPool(1, idle_timeout=0.05)
    stale = pool.acquire("a", timeout=0.1)
    time.sleep(0.1)
    fresh = pool.acquire("b", timeout=1.0)
    assert fresh.slot == stale.slot and pool.counters()["expired"] == 1
    with pytest.raises(LeaseConflictError):
        pool.get(stale.lease_id)


def test_concurrent_episodes_from_many_threads(small_db: Path) -> None:
    with ShopSimEnv(small_db, slots=8, reset_timeout=10.0) as shop:
        tasks = shop.list_tasks("train")[:24]
        errors: list[BaseException] = []

        def run(task_id: str) -> None:
            try:
                lease = shop.reset(task_id).lease_id
                for action in ("search[black]", "click[next >]", "click[back to search]"):
                    shop.step(lease, action)
                shop.terminate(lease, "action_limit")
                shop.release(lease)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(t,)) for t in tasks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        counters = shop.counters()
        assert counters["free_slots"] == 8 and counters["resets"] == 24 and counters["steps"] == 72
