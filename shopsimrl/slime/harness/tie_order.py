"""The one thing of slime's a leg changes: the order in which slime's rollout meets the groups that finished in one
event-loop turn.

slime's ``generate_rollout_async`` (``slime/rollout/sglang_rollout.py``) iterates the *set* ``done`` of
``asyncio.wait``, whose order follows the tasks' memory addresses: it differs from process to process.  The
order decides more than which groups of the turn are trained.  slime drops a zero-spread group unless
``remaining_batch_size <= rollout_batch_size`` (``keep_when_insufficient``), and a technical group always: with
one of each in a turn at ``remaining_batch_size = rollout_batch_size + 1``, zero-spread first drops both and
slime draws another wave; technical first keeps the zero-spread group and it does not.  Two processes of the
same run then hand out different prompts from that step on, a crashed leg drifts from the uninterrupted one before
its checkpoint, and the resume check fails though the resume is exact (the ``spread`` leg with cluster labels
drew a third wave at step 26 in one process of six, and not in the others).

:func:`in_creation_order` makes that order the tasks' creation order (slime creates a task per group, in the
order the data source handed them out): one of the orders slime may take, the same in every process.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Iterator
from typing import Any


def creation_number(task: Any) -> int:
    """asyncio numbers the tasks it names by default (``Task-<n>``) in creation order; other names come first."""
    number = task.get_name().rpartition("-")[2]
    return int(number) if number.isdigit() else -1


class CreationOrdered(set):  # type: ignore[type-arg]
    """A done set that iterates its tasks in creation order (a ``set`` still, for everything else)."""

    def __iter__(self) -> Iterator[Any]:
        return iter(sorted(set.__iter__(self), key=creation_number))


async def wait_in_creation_order(fs: Any, *args: Any, **kwargs: Any) -> tuple[set[Any], set[Any]]:
    """``asyncio.wait`` whose ``done`` iterates in creation order."""
    done, pending = await asyncio.wait(fs, *args, **kwargs)
    return CreationOrdered(done), pending


def in_creation_order() -> None:
    """slime's rollout module sees ``asyncio`` with :func:`wait_in_creation_order` as its ``wait`` (in the leg's
    child process only; asyncio itself is unchanged)."""
    from slime.rollout import sglang_rollout  # slime's own code: importable once the stand-ins are installed

    view = types.ModuleType("asyncio")
    view.__dict__.update(vars(asyncio))
    view.wait = wait_in_creation_order  # type: ignore[attr-defined]
    sglang_rollout.asyncio = view  # type: ignore[attr-defined]
