"""``replay_recorded``: one step of a real run replayed from its record, to check that the run decided as we do.

A run records one step as, in order: the groups it opened (:class:`Opened`) and the groups each
wake-up of its event loop handed back (:class:`Finished`, in the order the loop filtered them).
:func:`replay_recorded` runs the controller over that record and returns the step's outcome; a run
that kept or dropped other groups, or counted other drops, broke a rule.

Unlike :func:`~shopsimrl.sampling.replay.replay`, which predicts a step from how long each group
takes, nothing here is simulated: the record says which groups finished together and in what order.
The wave mode says which loop ran the step, and so how its record reads:

- ``fixed``: slime's own loop.  Its whole waves open by its inner-loop rule (the controller's
  ``submit``), so the record holds batches only.  slime filters a batch in the order of asyncio's
  done set, every group of it, also once the batch is full (a drop still counts; a group not
  dropped is surplus): ``WaveController.complete_in_order``.
- ``adaptive``: our rollout function, a shell around ``RolloutStep``.  What its sizer opened is in
  the record (``refill``); it decides a batch in submission order (``complete_batch``).

A record the controller's protocol refuses (a batch after the step was full, a group that was never
opened or finished twice) raises :class:`~shopsimrl.sampling.controller.ControllerStateError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from shopsimrl.sampling.controller import WaveController
from shopsimrl.sampling.guard import ConsecutiveFailureGuard
from shopsimrl.sampling.modes import WaveMode
from shopsimrl.sampling.step import StepDone
from shopsimrl.sampling.verdict import Verdict


class Opened(NamedTuple):
    """Record: the loop opened ``count`` new groups (the next submission indices), before its next batch."""

    count: int


class Finished(NamedTuple):
    """Record: groups that finished together, as (submission index, verdict), in the order the loop filtered them."""

    completions: Sequence[tuple[int, Verdict | str]]


def replay_recorded(
    record: Iterable[Opened | Finished],
    *,
    rollout_batch_size: int,
    over_sampling_batch_size: int,
    waves: WaveMode | str,
    guard: ConsecutiveFailureGuard | None = None,
    max_consecutive_failed_groups: int | None = None,
) -> StepDone:
    """The outcome of the step ``record`` describes, decided by the loop of wave mode ``waves`` (module docstring).

    The consecutive-failure stop: ``guard`` or ``max_consecutive_failed_groups`` (default 8), not both.
    """
    controller = WaveController(rollout_batch_size, over_sampling_batch_size, max_consecutive_failed_groups,
                                guard=guard)
    fixed = WaveMode.parse(waves) is WaveMode.FIXED
    if fixed:
        controller.submit()
    for event in record:
        if type(event) is Opened:
            if fixed:
                raise ValueError("a record of slime's own loop (fixed waves) holds batches only: its waves open by "
                                 "its inner-loop rule, not by the record")
            controller.refill(event.count)
        elif fixed:
            controller.complete_in_order(event.completions)
            if controller.needs_wave:
                controller.submit()
        else:
            controller.complete_batch(event.completions)
    return StepDone.of(controller, controller.abort())
