"""``replay_recorded``: one step of a real run replayed from its record, to check that the run decided as we do.

A run records one step as, in order: the groups it opened (:class:`Opened`) and the groups each
wake-up of its event loop handed back (:class:`Finished`, in the order the loop filtered them).
:func:`replay_recorded` runs the controller over that record and returns the step's outcome; a run
that kept or dropped other groups, or counted other drops, broke a rule.

Unlike :func:`~shopsimrl.sampling.replay.replay`, which predicts a step from how long each group
takes, nothing here is simulated: the record says which groups finished together and in what order.
The wave mode says which loop ran the step, and so how its record reads:

- ``fixed``: slime's own loop.  Its whole waves open by its inner-loop rule (the step's fixed-wave
  sizer), so the record holds batches only.  slime filters a batch in the order of asyncio's
  done set, every group of it, also once the batch is full (a drop still counts; a group not
  dropped is surplus): ``RolloutStep.finished(..., in_order=True)``.
- ``adaptive``: our rollout function, a pump around ``RolloutStep``.  What its sizer opened is in
  the record, and :class:`RecordedRefills` opens it again; it decides a batch in submission order.

Either way the record is pumped (:func:`~shopsimrl.sampling.pump.pump`) through a
:class:`~shopsimrl.sampling.step.RolloutStep`, as the run's own step (the consecutive-failure stop included).  A record the step's protocol refuses (a batch after
the step was full, a group that was never opened or finished twice) raises
:class:`~shopsimrl.sampling.controller.ControllerStateError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from shopsimrl.sampling.controller import ControllerStateError, WaveController
from shopsimrl.sampling.guard import ConsecutiveFailureGuard
from shopsimrl.sampling.modes import WaveMode
from shopsimrl.sampling.pump import Hooks, pump
from shopsimrl.sampling.source import Selector
from shopsimrl.sampling.step import RolloutStep, Start, StepDone, new_step
from shopsimrl.sampling.supply import SupplyOrder
from shopsimrl.sampling.verdict import Verdict


class Opened(NamedTuple):
    """Record: the loop opened ``count`` new groups (the next submission indices), before its next batch."""

    count: int


class Finished(NamedTuple):
    """Record: groups that finished together, as (submission index, verdict), in the order the loop filtered them."""

    completions: Sequence[tuple[int, Verdict | str]]


class RecordedRefills:
    """The wave sizer of a recorded adaptive step: it opens, when the step asks, what the record says the run's
    sizer opened next (``due``, set by the pump before each event)."""

    after_every_completion = True

    def __init__(self) -> None:
        self.due = 0

    def open(self, controller: WaveController, source: Selector, spread_chance: dict[int, float]) -> list[Start]:
        if not self.due:
            return []
        new = controller.refill(self.due)
        self.due = 0
        return [Start(index, controller.waves, index, range(1), None) for index in new]


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

    The consecutive-failure stop: ``guard`` or ``max_consecutive_failed_groups`` (default 8), not both; when it
    fires, ``TooManyTechnicalFailures`` is raised, as the run raised it.
    """
    fixed = WaveMode.parse(waves) is WaveMode.FIXED
    events = list(record)
    if fixed and any(type(e) is Opened for e in events):
        raise ValueError("a record of slime's own loop (fixed waves) holds batches only: its waves open by "
                         "its inner-loop rule, not by the record")
    refills = None if fixed else RecordedRefills()
    if refills is None:
        step = new_step(rollout_batch_size, over_sampling_batch_size, 1, source=SupplyOrder(None), waves=waves,
                        guard=guard, max_consecutive_failed_groups=max_consecutive_failed_groups, tell_source=False)
    else:
        step = RolloutStep(rollout_batch_size, over_sampling_batch_size, source=SupplyOrder(None), sizer=refills,
                           guard=guard, max_consecutive_failed_groups=max_consecutive_failed_groups,
                           tell_source=False)
    return pump(step, _Record(step, events, refills), in_order=fixed)


class _Record(Hooks):
    """``replay_recorded``'s shell: the record's batches, one per wake-up, each read in the order it was filtered;
    the groups the record opened are due to the sizer before the batch that follows them."""

    def __init__(self, step: RolloutStep, events: list[Opened | Finished], refills: RecordedRefills | None) -> None:
        self.step, self.events, self.refills = step, events, refills
        self.position = 0
        self.verdicts: dict[int, Verdict] = {}
        self._due()

    def _due(self) -> None:
        """The record's next groups opened (adaptive), to be opened when the step next asks its sizer."""
        while self.refills is not None and self.position < len(self.events):
            event = self.events[self.position]
            if type(event) is not Opened:
                break
            self.refills.due += event.count
            self.position += 1

    def now(self) -> float:
        return float(self.position)  # nothing is timed: the record's position

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        """The run started it: nothing to do."""

    def next_finished(self) -> list[int] | None:
        """The next batch (``None``: the record ends; what is in flight is aborted)."""
        if self.position >= len(self.events):
            return None
        event = self.events[self.position]
        self.position += 1
        self._due()
        assert type(event) is Finished
        batch = [int(i) for i, _v in event.completions]
        self.verdicts.update((int(i), Verdict.parse(v)) for i, v in event.completions)
        return batch

    def measure(self, index: int) -> tuple[Verdict, None]:
        return self.verdicts[index], None

    def measure_first_k(self, index: int) -> list[float | None]:
        raise AssertionError("a recorded step starts every group whole")

    def cancel(self, indices: tuple[int, ...]) -> None:
        """The step ended: a record that goes on (a batch after the step was full, groups opened the step never
        asked for) breaks the protocol."""
        left = sum(1 for e in self.events[self.position:] if type(e) is Finished)
        if left:
            raise ControllerStateError(f"state {self.step.state}: the record holds {left} more batches after the "
                                       f"step kept {self.step.kept}/{self.step.target} groups (a batch after the "
                                       "step was full)")
        if self.refills is not None and self.refills.due:  # groups opened after the step ended (or never asked for)
            raise ControllerStateError(f"state {self.step.state}: the record opens {self.refills.due} groups the "
                                       "step never asked for (after its batch was full)")
