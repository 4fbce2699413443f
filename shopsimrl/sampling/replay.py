"""``replay``: a deterministic discrete-event run of the wave controller.

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
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shopsimrl.sampling.controller import GroupDecision, WaveController
from shopsimrl.sampling.filter import REASON_TECHNICAL, REASON_ZERO_STD
from shopsimrl.sampling.guard import ConsecutiveFailureGuard
from shopsimrl.sampling.knobs import DEFAULT_OVER_SAMPLING_BATCH_SIZE, DEFAULT_ROLLOUT_BATCH_SIZE
from shopsimrl.sampling.verdict import Verdict


class SupplyExhausted(RuntimeError):
    """A wave was needed but the supply has fewer groups than the wave submits."""


@dataclass(frozen=True, slots=True)
class ReplayEvent:
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


def _parse_supply(groups: Iterable[tuple[Verdict | str, float]]) -> list[tuple[Verdict, float]]:
    supply = []
    for i, item in enumerate(groups):
        try:
            verdict, duration = item
        except (TypeError, ValueError):
            raise ValueError(f"supply item {i} must be (verdict, duration), got {item!r}") from None
        d = float(duration)
        if not math.isfinite(d) or d < 0:
            raise ValueError(f"supply item {i}: duration must be a finite number >= 0, got {duration!r}")
        supply.append((Verdict.parse(verdict), d))
    return supply


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
    supply = _parse_supply(groups)
    controller = WaveController(
        rollout_batch_size, over_sampling_batch_size, max_consecutive_failed_groups, guard=guard
    )  # both given: the controller's ValueError
    pending: list[tuple[float, int]] = []  # (completion time, index): a heap
    events: list[ReplayEvent] = []
    wave_times: list[float] = []
    now = 0.0

    def submit_waves() -> None:
        waves_before = controller.waves
        if controller.needs_wave and controller.submitted + controller.wave_size > len(supply):
            raise SupplyExhausted(
                f"wave {waves_before + 1} needs groups {controller.submitted}..{controller.submitted + controller.wave_size - 1} "
                f"at t={now:g}, but the supply has only {len(supply)} groups "
                f"(kept {len(controller.kept)}/{controller.target}, remaining {controller.remaining})"
            )
        for index in controller.submit():
            heapq.heappush(pending, (now + supply[index][1], index))
        wave_times.extend([now] * (controller.waves - waves_before))

    submit_waves()
    while not controller.done:
        if not pending:  # cannot happen: a step that needs a wave always gets one
            raise AssertionError(f"controller stalled in state {controller.state}: {controller.summary()}")
        now, index = heapq.heappop(pending)
        if pending and pending[0][0] == now:  # simultaneous completions: one batch
            batch = [(index, supply[index][0])]
            while pending and pending[0][0] == now:
                index = heapq.heappop(pending)[1]
                batch.append((index, supply[index][0]))
            decisions: list[GroupDecision] = controller.complete_batch(batch)
        else:
            decisions = [controller.complete(index, supply[index][0])]
        events.extend(ReplayEvent(now, d) for d in decisions)
        if controller.needs_wave:
            submit_waves()
    aborted = controller.abort()
    return ReplayResult(
        kept=list(controller.kept),
        fallback=list(controller.fallback),
        dropped={reason: list(indices) for reason, indices in controller.dropped.items()},
        surplus=list(controller.surplus),
        aborted=aborted,
        waves=controller.waves,
        submitted=controller.submitted,
        remaining=controller.remaining,
        events=events,
        wave_times=wave_times,
        end_time=now,
    )
