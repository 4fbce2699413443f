"""The O(1) completion path: done-callbacks into a queue, batches of everything already finished."""

from __future__ import annotations

import asyncio

from shopsimrl.rollout.completions import CompletionQueue


async def _value(fut: asyncio.Future[int]) -> int:
    return await fut


async def test_simultaneous_completions_form_one_batch_and_later_ones_the_next():
    loop = asyncio.get_running_loop()
    queue: CompletionQueue[int, int] = CompletionQueue()
    futures = [loop.create_future() for _ in range(5)]
    for i, fut in enumerate(futures):
        queue.add(i, asyncio.create_task(_value(fut)))
    for i in (3, 1, 4):
        futures[i].set_result(i * 10)
    await asyncio.sleep(0)  # the tasks finish
    await asyncio.sleep(0)  # their callbacks run
    batch = await queue.next_batch()
    assert sorted(k for k, _ in batch) == [1, 3, 4]
    assert sorted(t.result() for _, t in batch) == [10, 30, 40]
    assert len(queue) == 2
    futures[0].set_result(0)
    batch = await queue.next_batch()
    assert [k for k, _ in batch] == [0]
    cancelled, undelivered = await queue.cancel_all()
    assert cancelled == [2] and undelivered == []
    assert len(queue) == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_cancel_all_waits_for_cleanup_and_reports_finished_but_undelivered():
    loop = asyncio.get_running_loop()
    queue: CompletionQueue[int, str] = CompletionQueue()
    released: list[int] = []

    async def episode(i: int) -> str:
        try:
            await loop.create_future()  # never resolves
            return "done"
        finally:
            await asyncio.sleep(0.01)  # cleanup that takes time (an env release)
            released.append(i)

    async def quick() -> str:
        return "quick"

    for i in range(3):
        queue.add(i, asyncio.create_task(episode(i)))
    queue.add(99, asyncio.create_task(quick()))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    cancelled, undelivered = await queue.cancel_all()
    assert sorted(cancelled) == [0, 1, 2] and undelivered == [99]
    assert sorted(released) == [0, 1, 2]  # every cleanup ran before cancel_all returned
    assert asyncio.all_tasks() == {asyncio.current_task()}
