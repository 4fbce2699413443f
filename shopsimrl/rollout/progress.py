"""What the live view sees of a running step: per-wave counters and the snapshots it draws.

The driver only reports what happened (a wave opened, a group decided, groups aborted);
:class:`LiveProgress` keeps the counters and calls the :class:`StepObserver`, building a
snapshot only when the observer asks for one, so a run without a view pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from shopsimrl.rollout.group import EpisodeSlots, GroupRun
from shopsimrl.rollout.report import StepReport
from shopsimrl.sampling import DROP_REASONS, Decision, GroupDecision, State
from shopsimrl.sampling.step import RolloutStep


@dataclass
class WaveStats:
    """One wave's line in the live view."""

    wave: int
    submitted: int = 0
    completed: int = 0
    accepted: int = 0
    fallback: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {r: 0 for r in DROP_REASONS})
    surplus: int = 0
    aborted: int = 0
    running: int = 0  # filled in by snapshots: groups with an episode slot, not finished

    @property
    def kept(self) -> int:
        return self.accepted + self.fallback


@dataclass
class StepProgress:
    """What the live view shows of a running step."""

    step: int
    elapsed: float
    target: int
    kept: int
    remaining: int
    episodes_running: int
    waves: list[WaveStats]
    state: State


class StepObserver(Protocol):
    """Receives the step's progress (the live view); every call comes from the event loop."""

    def step_started(self, step: int, target: int) -> None: ...

    def progressed(self, snapshot: Callable[[], StepProgress]) -> None: ...

    def step_finished(self, report: StepReport | None, progress: StepProgress) -> None: ...


class LiveProgress:
    """One step's wave counters, told to ``observer`` (``None``: counted, never shown).

    ``rollout``, ``groups`` and ``slots`` are the step's own, read when a snapshot is taken;
    ``elapsed`` is the step's clock.
    """

    def __init__(self, step: int, rollout: RolloutStep, groups: dict[int, GroupRun], slots: EpisodeSlots,
                 elapsed: Callable[[], float], observer: StepObserver | None) -> None:
        self.step = step
        self.rollout = rollout  # read only: the counters the view shows
        self.groups = groups
        self.slots = slots
        self.elapsed = elapsed
        self.observer = observer
        self.waves: dict[int, WaveStats] = {}

    # -- what happened ---------------------------------------------------------------------------
    def opened(self, wave: int, submitted: int) -> None:
        self.waves[wave] = WaveStats(wave, submitted=submitted)

    def decided(self, d: GroupDecision) -> None:
        stats = self.waves[d.wave]
        stats.completed += 1
        if d.decision is Decision.ACCEPTED:
            stats.accepted += 1
        elif d.decision is Decision.FALLBACK:
            stats.fallback += 1
        elif d.decision is Decision.DROPPED:
            stats.dropped[d.reason] += 1  # type: ignore[index]
        else:
            stats.surplus += 1

    def aborted(self, indices: Iterable[int]) -> None:
        for index in indices:
            self.waves[self.rollout.wave_of(index)].aborted += 1

    # -- the observer ----------------------------------------------------------------------------
    def started(self) -> None:
        if self.observer:
            self.observer.step_started(self.step, self.rollout.target)

    def changed(self) -> None:
        if self.observer:
            self.observer.progressed(self.snapshot)

    def finished(self, report: StepReport | None) -> None:
        """``report``: ``None`` when the step stopped early (interrupted, the guard, a write failed)."""
        if self.observer:
            self.observer.step_finished(report, self.snapshot())

    def snapshot(self) -> StepProgress:
        waves = sorted(self.waves.values(), key=lambda w: w.wave)
        for w in waves:
            w.running = 0
        for index in self.rollout.in_flight:
            group = self.groups[index]
            if group.started:
                self.waves[group.wave].running += 1
        return StepProgress(
            step=self.step,
            elapsed=self.elapsed(),
            target=self.rollout.target,
            kept=self.rollout.kept,
            remaining=self.rollout.remaining,
            episodes_running=self.slots.in_use,
            waves=waves,
            state=self.rollout.state,
        )
