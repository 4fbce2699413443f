"""``replay``: a deterministic discrete-event run of one rollout step (:class:`~shopsimrl.sampling.step.RolloutStep`).

Give it the supply of groups in submission order, each with its verdict and how
long it takes to generate; it tells what slime would keep, drop, admit as a
fallback, leave as surplus and abort — the tool to predict a knob change, or to
check a real run's decisions after the fact.

Clock rules: a group submitted at time t completes at t + duration; the first
wave is submitted at 0 and any later wave at the time of the decision that made
it necessary; completions at the same time form one batch, processed in
submission order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from shopsimrl.sampling.controller import GroupDecision
from shopsimrl.sampling.filter import REASON_TECHNICAL, REASON_ZERO_STD
from shopsimrl.sampling.guard import ConsecutiveFailureGuard
from shopsimrl.sampling.knobs import DEFAULT_OVER_SAMPLING_BATCH_SIZE, DEFAULT_ROLLOUT_BATCH_SIZE
from shopsimrl.sampling.pump import Hooks, pump
from shopsimrl.sampling.step import FixedWaves, RolloutStep, Start, StepDone, WaveOpened
from shopsimrl.sampling.supply import SupplyExhausted, SupplyOrder, SupplyShort, parse_supply
from shopsimrl.sampling.verdict import Verdict

__all__ = ["ReplayEvent", "ReplayResult", "SupplyExhausted", "replay"]  # SupplyExhausted: where it always was


class ReplayEvent(NamedTuple):
    """One decision (the controller's own :class:`GroupDecision`), with the simulated time it was taken at."""

    time: float
    group: GroupDecision

    def as_dict(self) -> dict[str, object]:
        return {"time": self.time, **self.group.as_dict()}


@dataclass
class ReplayResult:
    kept: list[int]  # submission indices that entered the batch, in the order they did (fallbacks included)
    fallback: list[int]  # the kept groups without spread (keep_when_insufficient); accepted = kept - fallback
    dropped: dict[str, list[int]]
    surplus: list[int]
    aborted: list[int]
    waves: int
    submitted: int
    remaining: int
    events: list[ReplayEvent] = field(default_factory=list)
    wave_times: list[float] = field(default_factory=list)  # when each wave was submitted
    end_time: float = 0.0  # time of the last decision: the step's simulated wall time

    @property
    def zero_std_group_drop_count(self) -> int:
        return len(self.dropped[REASON_ZERO_STD])

    @property
    def technical_group_drop_count(self) -> int:
        return len(self.dropped[REASON_TECHNICAL])

    @property
    def completed(self) -> int:
        return len(self.events)

    @classmethod
    def of(cls, done: StepDone, events: list[ReplayEvent], wave_times: list[float], end_time: float) -> ReplayResult:
        """The step's outcome, with the replay's own record of when things happened."""
        return cls(kept=done.kept, fallback=done.fallback, dropped=done.dropped, surplus=done.surplus,
                   aborted=done.aborted, waves=done.waves, submitted=done.submitted, remaining=done.remaining,
                   events=events, wave_times=wave_times, end_time=end_time)

    def summary(self) -> dict[str, object]:
        return {
            "kept": len(self.kept),
            "fallback": len(self.fallback),
            "zero_std_group_drop_count": self.zero_std_group_drop_count,
            "technical_group_drop_count": self.technical_group_drop_count,
            "surplus": len(self.surplus),
            "aborted": len(self.aborted),
            "waves": self.waves,
            "submitted": self.submitted,
            "completed": self.completed,
            "remaining": self.remaining,
            "end_time": self.end_time,
        }


def replay(
    groups: Sequence[tuple[Verdict | str, float]] | Iterable[tuple[Verdict | str, float]],
    *,
    rollout_batch_size: int = DEFAULT_ROLLOUT_BATCH_SIZE,
    over_sampling_batch_size: int = DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    max_consecutive_failed_groups: int | None = None,
    guard: ConsecutiveFailureGuard | None = None,
) -> ReplayResult:
    """Run one rollout step over ``groups`` (supply in submission order) and return every decision.

    The consecutive-failure stop: ``guard`` (shared across steps) or ``max_consecutive_failed_groups``
    (default 8), not both (``ValueError``).

    Raises ``SupplyExhausted`` when a wave is needed and the supply cannot fill it,
    and ``TooManyTechnicalFailures`` when the consecutive-failure stop fires.
    """
    supply = parse_supply(groups)
    step = RolloutStep(rollout_batch_size, over_sampling_batch_size, source=SupplyOrder(len(supply)),
                       sizer=FixedWaves(1), guard=guard, max_consecutive_failed_groups=max_consecutive_failed_groups,
                       tell_source=False)
    shell = _Timed(step, supply)
    try:
        done = pump(step, shell)
    except SupplyShort as short:
        raise short.exhausted(step.controller, shell.t) from None
    return ReplayResult.of(done, shell.events, shell.wave_times, shell.t)


class _Timed(Hooks):
    """``replay``'s shell: a group submitted at t completes at t + its duration; completions at one time are one
    batch (module docstring)."""

    def __init__(self, step: RolloutStep, supply: Sequence[tuple[Verdict, float]]) -> None:
        self.step, self.supply = step, supply
        self.pending: list[tuple[float, int]] = []  # (completion time, index): a heap
        self.events: list[ReplayEvent] = []
        self.wave_times: list[float] = []
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        heapq.heappush(self.pending, (t + self.supply[start.index][1], start.index))

    def next_finished(self) -> list[int]:
        if not self.pending:  # cannot happen: a step that needs a wave always gets one
            raise AssertionError(f"step stalled in state {self.step.state}: {self.step.controller.summary()}")
        self.t, index = heapq.heappop(self.pending)
        batch = [index]
        while self.pending and self.pending[0][0] == self.t:  # simultaneous completions: one batch
            batch.append(heapq.heappop(self.pending)[1])
        return batch

    def measure(self, index: int) -> tuple[Verdict, None]:
        return self.supply[index][0], None

    def measure_first_k(self, index: int) -> list[float | None]:
        raise AssertionError("replay starts every group whole")

    def cancel(self, indices: tuple[int, ...]) -> None:
        """Groups still pending never complete (nothing to undo)."""

    def opened(self, wave: WaveOpened, t: float) -> None:
        self.wave_times.append(t)

    def decided(self, decision: GroupDecision, t: float) -> None:
        self.events.append(ReplayEvent(t, decision))
