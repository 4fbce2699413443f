"""Cancelling a group waits for every sibling to unwind (each releases its env session first)."""

from __future__ import annotations

import asyncio

import pytest

from shopsimrl.rollout.group import EpisodeSlots, EpisodeSpec, GroupRun, run_group


async def test_a_cancelled_group_completes_only_after_every_sibling_has_released():
    released: list[int] = []

    async def runner(spec, meter):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            # a release that takes longer for later siblings, shielded like the agent's
            await asyncio.shield(asyncio.sleep(0.01 * (spec.sibling + 1)))
            released.append(spec.sibling)
            raise

    specs = [EpisodeSpec(task_id="t", rollout_id=f"r{i}", seed=i, trace_path=None, group_index=0, sibling=i)
             for i in range(4)]
    group = GroupRun(index=0, wave=1, task_id="t", specs=specs)
    task = asyncio.create_task(run_group(group, runner, EpisodeSlots(8)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(released) == [0, 1, 2, 3]  # nobody was still releasing when the group reported cancelled
