"""The simulator's groups in flight: their episodes on the capacity model's clock, and what each group drew.

The simulator's stand-in for the driver's asyncio tasks.  A group's ``n`` rewards and solo
durations are drawn once, when it first starts, so a staged group's rest is the rest of the
same group and the world's draws follow the order groups start in, staged or not.
"""

from __future__ import annotations

from collections.abc import Collection

from shopsimrl.rollout.gputime import SharedThroughput
from shopsimrl.sampling.step import Start
from shopsimrl.simulate.model import World

Job = tuple[int, int]
"""(group, its first sibling in this start): a whole group, a staged group's first ``K``, or its rest."""


class GroupsInFlight:
    """Starts the siblings a :class:`Start` names on :class:`SharedThroughput` (``capacity=None``: no sharing,
    a job takes its slowest sibling) and tells which groups' jobs have ended."""

    def __init__(self, world: World, n_samples_per_prompt: int, capacity: float | None) -> None:
        self.world = world
        self.n = n_samples_per_prompt
        self.clock = SharedThroughput(capacity)
        self.drawn: dict[int, tuple[list[float] | None, list[float]]] = {}  # group -> (rewards or None, durations)
        self.first: dict[int, int] = {}  # group -> siblings of its first start (a staged group: K)
        self.running: dict[Job, list[tuple[Job, int]]] = {}  # job -> its episodes' clock keys
        self.left: dict[Job, int] = {}  # job -> its episodes still running
        self.episodes = 0  # episodes started (a staged group stopped early: K)

    def start(self, start: Start) -> bool:
        """Start the named siblings; ``True`` when the group is new (not a staged group's rest)."""
        index = start.index
        new = index not in self.drawn
        if new:
            self.drawn[index] = self.world.play_siblings(str(start.prompt), self.n)
            self.first[index] = len(start.siblings)
        job, durations = (index, start.siblings.start), self.drawn[index][1]
        self.running[job] = [(job, s) for s in start.siblings]
        for key in self.running[job]:
            self.clock.start(key, durations[key[1]])
        self.left[job] = len(start.siblings)
        self.episodes += len(start.siblings)
        return new

    def cancel(self, indices: Collection[int]) -> None:
        """Abort these groups: every episode of their running jobs stops sharing the throughput."""
        self.clock.cancel([key for job, keys in self.running.items() if job[0] in indices for key in keys])

    def next(self) -> tuple[float, list[int]]:
        """Advance to the next finish: its time, and the groups whose job ended then (in index order)."""
        now, finished = self.clock.next()
        ended = []
        for job, _sibling in finished:
            self.left[job] -= 1
            if not self.left[job]:
                del self.left[job], self.running[job]
                ended.append(job[0])
        return now, sorted(ended)

    def rewards(self, index: int) -> list[float] | None:
        """The group's ``n`` rewards (``None``: not every sibling could be scored)."""
        return self.drawn[index][0]

    def first_rewards(self, index: int) -> list[float | None]:
        """A staged group's first ``K`` rewards (its first start's), as the step hears them (``None``: unscored)."""
        rewards, k = self.drawn[index][0], self.first[index]
        return [None] * k if rewards is None else rewards[:k]  # type: ignore[return-value]
