"""Fault injection draws each episode's failures from the episode alone: the order episodes run in, and a resume,
change nothing about which calls fail."""

from __future__ import annotations

import asyncio

from shopsimrl.rollout.faults import FaultInjectingEnv, InjectedFault


class Quiet:
    """An env client that always answers (what the wrapper wraps)."""

    async def reset(self, task_id):
        return task_id

    async def step(self, lease_id, action):
        return action


async def pattern(env: FaultInjectingEnv, calls: int = 40) -> list[bool]:
    failed = []
    for i in range(calls):
        try:
            await (env.reset("t") if i == 0 else env.step("lease", "a"))
            failed.append(False)
        except InjectedFault:
            failed.append(True)
    return failed


def test_an_episode_fails_the_same_calls_whatever_ran_before_it():
    async def main():
        shared = FaultInjectingEnv(Quiet(), 0.3, seed=4)
        alone = await pattern(shared.for_episode("s2-g1-r0/77"))
        other = FaultInjectingEnv(Quiet(), 0.3, seed=4)
        for key in ("s1-g0-r0/1", "s1-g0-r1/2", "s1-g3-r2/3"):  # other episodes first, as before a resume
            await pattern(other.for_episode(key))
        after = await pattern(other.for_episode("s2-g1-r0/77"))
        assert alone == after and any(alone) and not all(alone)
        assert await pattern(shared.for_episode("s2-g1-r1/78")) != alone  # another episode, other draws
        assert shared.injected == sum(alone) + sum(await pattern(FaultInjectingEnv(Quiet(), 0.3, seed=4)
                                                                 .for_episode("s2-g1-r1/78")))
        assert await pattern(FaultInjectingEnv(Quiet(), 0.3, seed=5).for_episode("s2-g1-r0/77")) != alone

    asyncio.run(main())
