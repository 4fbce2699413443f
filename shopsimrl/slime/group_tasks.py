"""slime's tasks for the groups a rollout step starts: asyncio tasks in slime's ``GenerateState``.

A whole group goes through slime's ``generate_and_rm_group``, as in slime's own loop.  A staged
group's siblings (its first ``K``, later the rest) go one by one through slime's per-sample
``generate_and_rm``; its first ``K`` are held here until the rest joins them, so the filter
judges the whole group.  slime is imported when used, never at import.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from shopsimrl.sampling.step import Start


class GroupGeneration:
    """The step's tasks in ``state.pendings`` (``state``: slime's ``GenerateState``, reset by the caller)."""

    def __init__(self, args: Any) -> None:
        # slime: only inside slime's process, never at import
        from slime.rollout import sglang_rollout

        self.args = args
        self.state = sglang_rollout.GenerateState(args)
        self.heads: dict[int, list[Any]] = {}  # a staged group's first K samples, back (the caller keeps them)
        self._index_of: dict[asyncio.Task[Any], int] = {}

    def start(self, start: Start) -> None:
        """Start the siblings a :class:`Start` names: the whole group, or some of its samples (staged)."""
        # slime: only inside slime's process, never at import
        from slime.rollout import sglang_rollout

        args, state = self.args, self.state
        if len(start.siblings) == len(start.prompt):
            task = asyncio.create_task(sglang_rollout.generate_and_rm_group(
                args, start.prompt, sampling_params=state.sampling_params.copy(), evaluation=False))
        else:
            task = asyncio.create_task(_siblings(args, start.prompt, start.siblings, state.sampling_params))
        state.pendings.add(task)
        self._index_of[task] = start.index

    async def finished(self) -> list[tuple[int, list[Any]]] | None:
        """Wait until some tasks are done: ``(index, samples)`` for each, in slime's order (a set's); ``None``: no
        task is pending."""
        if not self.state.pendings:
            return None
        done, self.state.pendings = await asyncio.wait(self.state.pendings, return_when=asyncio.FIRST_COMPLETED)
        return [(self._index_of.pop(task), task.result()) for task in done]

    def whole(self, index: int, samples: list[Any]) -> list[Any]:
        """A group back whole: a staged group's rest joined to its first ``K`` (judged whole), or as it came."""
        head = self.heads.pop(index, None)
        return samples if head is None else [*head, *samples]


async def _siblings(args: Any, group: list[Any], siblings: range, sampling_params: dict[str, Any]) -> list[Any]:
    """Some of a group's samples, each through slime's ``generate_and_rm`` (as ``generate_and_rm_group`` does
    for all of them: a session id per sample, a copy of the sampling parameters each)."""
    # slime: only inside slime's process, never at import
    from slime.rollout import sglang_rollout

    samples = [group[s] for s in siblings]
    for sample in samples:
        if getattr(sample, "session_id", None) is None:
            sample.session_id = str(uuid.uuid4())
    return list(await asyncio.gather(*(sglang_rollout.generate_and_rm(args, sample, sampling_params.copy(),
                                                                      evaluation=False) for sample in samples)))
