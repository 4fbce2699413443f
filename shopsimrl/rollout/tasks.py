"""The step's groups as asyncio tasks: how a ``Start`` becomes running episodes, and triage on finish.

A group's siblings get their rollout ids, seeds and trace paths here, and its task reports itself to a
:class:`~shopsimrl.rollout.completions.CompletionQueue`.  Triage is written when a group finishes, *before*
the step object judges it (an all-wrong group dropped as zero-std still reaches the Failure Analyst);
a staged group back from its first ``K`` siblings is triaged only if it is decided then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from shopsimrl.rollout.completions import CompletionQueue, results
from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.group import EpisodeSpec, GroupRun, episode_seed, never_succeeded, run_group, run_rest
from shopsimrl.rollout.outputs import StepPaths, append_failure_queue, write_triage
from shopsimrl.sampling.step import Start


class GroupTasks:
    """Every group one step started (``groups``, by submission index) and the tasks still running them."""

    def __init__(self, ctx: RunContext, step: int, paths: StepPaths, elapsed: Callable[[], float]) -> None:
        self.ctx = ctx
        self.step = step
        self.paths = paths
        self.elapsed = elapsed  # the step's clock: triage records when each group finished
        self.groups: dict[int, GroupRun] = {}
        self.completions: CompletionQueue[int, GroupRun] = CompletionQueue()

    def start(self, start: Start, *, first_stage: bool = False) -> GroupRun | None:
        """Start the siblings ``start`` names; the new group, or ``None`` for the rest of a staged group.
        ``first_stage``: a staged group's first K (the step's ``runs_first_k``), triaged only once decided."""
        index, ctx, step, task_id = start.index, self.ctx, self.step, str(start.prompt)
        specs = self.specs(start)
        name = f"shopsimrl-step{step}-group{index}"
        group = None
        if index in self.groups:  # staged siblings: the rest of a group whose first K are back
            work = run_rest(self.groups[index], specs, ctx.runner, ctx.slots, on_finished=self.triage)
            name += "-rest"
        else:
            group = self.groups[index] = GroupRun(index=index, wave=start.wave, task_id=task_id, specs=specs,
                                                  weight=ctx.source.weight(start.prompt))
            work = run_group(group, ctx.runner, ctx.slots, on_finished=None if first_stage else self.triage)
        self.completions.add(index, asyncio.create_task(work, name=name))
        return group

    def specs(self, start: Start) -> list[EpisodeSpec]:
        """The siblings ``start`` names: their rollout ids, seeds and trace paths."""
        index, ctx, step = start.index, self.ctx, self.step
        return [EpisodeSpec(task_id=str(start.prompt), rollout_id=f"s{step}-g{index}-r{i}",
                            seed=episode_seed(ctx.seed, step, index, i), trace_path=self.paths.trace(index, i),
                            group_index=index, sibling=i) for i in start.siblings]

    async def next_batch(self) -> list[GroupRun]:
        """The next finished group and every other one finished with it (an output not written: raised)."""
        return results(await self.completions.next_batch())

    def triage(self, group: GroupRun) -> None:
        """Triage (and the Failure Analyst queue) before the group reaches the filter."""
        write_triage(self.paths, group, step=self.step, finished_at=self.elapsed())
        if never_succeeded(group.episodes):
            append_failure_queue(self.ctx.paths, group, step=self.step)

    async def cancel_all(self) -> tuple[list[int], list[int]]:
        """Cancel every running group and wait until each episode has unwound (released its env session).

        Returns (cancelled indices, indices of groups that had finished but were never taken)."""
        return await self.completions.cancel_all()
