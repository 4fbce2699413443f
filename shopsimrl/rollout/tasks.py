"""The train-task sampler: a seeded shuffle per epoch whose position survives across steps.

slime's data buffer walks the prompt set epoch by epoch; a rollout step takes
the next prompts from where the previous step stopped.  Within one step a task
is never submitted twice (two groups of the same prompt would be one group
split in two): a task met again after an epoch boundary inside the same step is
deferred to the next step.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence


class NotEnoughTasksError(ValueError):
    """A step asked for more distinct tasks than the split holds."""


class TaskSampler:
    """Hands out task ids: shuffled once per epoch with ``seed`` (and the epoch number)."""

    def __init__(self, task_ids: Sequence[str], seed: int = 0) -> None:
        unique = list(dict.fromkeys(task_ids))
        if not unique:
            raise NotEnoughTasksError("the task list is empty: build the catalog with a train split first")
        self._tasks = unique
        self._seed = seed
        self.epoch = 0  # number of epochs started so far
        self._order: deque[str] = deque()
        self._deferred: deque[str] = deque()  # met again inside one step: served first next step
        self._used_this_step: set[str] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def begin_step(self) -> None:
        """A new rollout step: tasks may repeat across steps, never within one."""
        self._used_this_step.clear()

    def take(self, n: int) -> list[str]:
        """The next ``n`` tasks of the current step, all distinct from every task already taken in it."""
        if len(self._used_this_step) + n > len(self._tasks):
            raise NotEnoughTasksError(
                f"this step needs {len(self._used_this_step) + n} distinct tasks but the train split has "
                f"{len(self._tasks)}: build a larger catalog (--products) or lower --over-sampling-batch-size"
            )
        out: list[str] = []
        skipped: list[str] = []
        while len(out) < n:
            if self._deferred and self._deferred[0] not in self._used_this_step:
                task = self._deferred.popleft()
            else:
                if not self._order:
                    self._new_epoch()
                task = self._order.popleft()
                if task in self._used_this_step:
                    skipped.append(task)
                    continue
            self._used_this_step.add(task)
            out.append(task)
        self._deferred.extend(skipped)
        return out

    def _new_epoch(self) -> None:
        order = list(self._tasks)
        random.Random(f"shopsimrl-tasks/{self._seed}/{self.epoch}").shuffle(order)
        self.epoch += 1
        self._order.extend(order)

    def state(self) -> dict[str, int]:
        """Where the sampler stands (for logs): epoch and position in it."""
        position = len(self._tasks) - len(self._order) if self.epoch else 0
        return {"epoch": self.epoch, "position": position, "deferred": len(self._deferred)}
