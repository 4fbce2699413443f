"""``WaveController``: slime's over-sampling loop as a sans-I/O state machine (docs/dynamic-sampling.md §3-§5, §8).

It is told "these groups finished, with these verdicts" and answers one decision
per group, and "submit N new groups now".  Time, tasks and sockets live outside
it: the asyncio driver, ``replay`` and the benchmarks all run this same machine.

The loop it reproduces (slime's ``generate_rollout_async`` with our filter)::

    while len(data) < target:                    # outer loop
        while remaining < target:                # inner loop: a whole new wave
            submit(over_sampling_batch_size); remaining += over_sampling_batch_size
        batch = everything that finished since the last wait
        for group in batch:                      # ShopSimRL: in submission order
            output = filter(group)
            if should_drop(output, remaining, target): remaining -= 1; continue
            if len(data) < target: data.append(group)   # else: surplus
    abort everything still in flight
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from enum import Enum
from typing import NamedTuple

from shopsimrl.sampling.filter import DROP_REASONS, filter_output, should_drop
from shopsimrl.sampling.guard import ConsecutiveFailureGuard
from shopsimrl.sampling.knobs import (
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_ROLLOUT_BATCH_SIZE,
    validate_wave_knobs,
)
from shopsimrl.sampling.verdict import Verdict


class Decision(str, Enum):
    ACCEPTED = "accepted"  # kept for training (had reward spread)
    FALLBACK = "fallback"  # kept through keep_when_insufficient (zero-std, remaining <= target)
    DROPPED = "dropped"  # really dropped: remaining -= 1
    SURPLUS = "surplus"  # not dropped, but data was already full: never trained


class GroupDecision(NamedTuple):
    """The controller's answer for one completed group (a tuple: cheap on the hot path)."""

    index: int  # submission index of the group in this step
    wave: int  # 1-based wave the group was submitted in
    verdict: Verdict
    decision: Decision
    reason: str | None  # the filter's reason (drop reason, or why a fallback was needed)
    remaining: int  # remaining after the decision
    kept: int  # len(data) after the decision

    def as_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "wave": self.wave,
            "verdict": self.verdict.value,
            "decision": self.decision.value,
            "reason": self.reason,
            "remaining": self.remaining,
            "kept": self.kept,
        }


class ControllerStateError(RuntimeError):
    """The controller was driven out of protocol; the message names the state it was in."""


class WaveController:
    """One rollout step's wave loop.  Create one per step; share the guard across steps."""

    def __init__(
        self,
        rollout_batch_size: int = DEFAULT_ROLLOUT_BATCH_SIZE,
        over_sampling_batch_size: int = DEFAULT_OVER_SAMPLING_BATCH_SIZE,
        max_consecutive_failed_groups: int = DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
        *,
        guard: ConsecutiveFailureGuard | None = None,
    ) -> None:
        validate_wave_knobs(rollout_batch_size, over_sampling_batch_size)
        self.target = rollout_batch_size
        self.wave_size = over_sampling_batch_size
        self.guard = guard if guard is not None else ConsecutiveFailureGuard(max_consecutive_failed_groups)
        self.submitted = 0
        self.remaining = 0
        self.waves = 0
        self.kept: list[int] = []
        self.fallback: list[int] = []
        self.dropped: dict[str, list[int]] = {reason: [] for reason in DROP_REASONS}
        self.surplus: list[int] = []
        self.aborted: list[int] = []
        self.completed = 0
        self._in_flight: set[int] = set()
        self._wave_starts: list[int] = []  # first submission index of each wave
        self._failed: BaseException | None = None
        self._aborted_step = False

    # -- state -------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """The step has its ``target`` kept groups: stop waiting, abort what is in flight."""
        return len(self.kept) >= self.target

    @property
    def in_flight(self) -> frozenset[int]:
        return frozenset(self._in_flight)

    @property
    def drop_counts(self) -> dict[str, int]:
        return {reason: len(indices) for reason, indices in self.dropped.items()}

    @property
    def state(self) -> str:
        if self._failed is not None:
            return "FAILED"
        if self._aborted_step:
            return "ABORTED"
        if self.done:
            return "DONE"
        if self.remaining < self.target:
            return "NEEDS_WAVE"
        return "WAITING"

    def wave_of(self, index: int) -> int:
        """1-based wave of a submitted group."""
        if not 0 <= index < self.submitted:
            raise KeyError(f"group {index} was never submitted (submitted: {self.submitted})")
        return bisect_right(self._wave_starts, index)  # waves are contiguous ranges of indices

    # -- transitions ---------------------------------------------------------------------------
    def submit(self) -> range:
        """The new groups to submit now: whole waves while ``remaining < target`` (slime's inner loop).

        Returns an empty range when no wave is needed (or the step is done).
        """
        self._check_live("submit")
        start = self.submitted
        if not self.done:
            while self.remaining < self.target:
                self._wave_starts.append(self.submitted)
                self.waves += 1
                self.submitted += self.wave_size
                self.remaining += self.wave_size
        new = range(start, self.submitted)
        self._in_flight.update(new)
        return new

    def refill(self, count: int) -> range:
        """Adaptive waves only: submit ``count`` new groups now, as one small wave.

        Same bookkeeping as a wave (``remaining += count``, a wave number for
        ``wave_of``); the filter, the fallback and abort are untouched.  ``submit()``
        (slime's whole waves) is the faithful path and does not call this.
        """
        self._check_live("refill")
        self._check_not_done()
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"refill count must be an integer >= 1, got {count!r}")
        start = self.submitted
        self._wave_starts.append(start)
        self.waves += 1
        self.submitted += count
        self.remaining += count
        new = range(start, self.submitted)
        self._in_flight.update(new)
        return new

    def complete(self, index: int, verdict: Verdict | str) -> GroupDecision:
        """One group finished on its own (a batch of one)."""
        self._check_live("complete")
        self._check_not_done()
        if index not in self._in_flight:
            raise ControllerStateError(self._not_in_flight(index))
        return self._decide(index, verdict if type(verdict) is Verdict else Verdict.parse(verdict))

    def complete_batch(self, completions: Iterable[tuple[int, Verdict | str]]) -> list[GroupDecision]:
        """Groups that finished together: each is filtered and counted, in submission order.

        A group processed after ``data`` filled up in the same batch is still
        filtered (a drop still counts); if not dropped it is surplus.
        """
        self._check_live("complete_batch")
        self._check_not_done()
        batch = sorted((int(i), Verdict.parse(v)) for i, v in completions)
        for i, (index, _verdict) in enumerate(batch):
            if index not in self._in_flight:
                raise ControllerStateError(self._not_in_flight(index))
            if i and batch[i - 1][0] == index:
                raise ControllerStateError(f"group {index} appears twice in one batch")
        return [self._decide(index, verdict) for index, verdict in batch]

    def _decide(self, index: int, verdict: Verdict) -> GroupDecision:
        """Filter one in-flight group and apply slime's drop rule: the hot path."""
        self._in_flight.discard(index)
        self.completed += 1
        try:
            self.guard.observe(verdict, index)
        except BaseException as exc:
            self._failed = exc
            raise
        output = filter_output(verdict)
        kept = self.kept
        if should_drop(output, self.remaining, self.target):
            self.remaining -= 1
            self.dropped[output.reason].append(index)  # type: ignore[index]
            decision = Decision.DROPPED
        elif len(kept) < self.target:
            kept.append(index)
            if output.keep:
                decision = Decision.ACCEPTED
            else:
                self.fallback.append(index)
                decision = Decision.FALLBACK
        else:
            self.surplus.append(index)
            decision = Decision.SURPLUS
        return GroupDecision(
            index, bisect_right(self._wave_starts, index), verdict, decision, output.reason, self.remaining, len(kept)
        )

    def abort(self) -> list[int]:
        """End the step: every in-flight group is aborted (never trained, never counted as completed)."""
        aborted = sorted(self._in_flight)
        self.aborted.extend(aborted)
        self._in_flight.clear()
        self._aborted_step = True
        return aborted

    # -- helpers -------------------------------------------------------------------------------
    def _check_live(self, what: str) -> None:
        if self._failed is not None:
            raise ControllerStateError(f"state FAILED: {what}() after the step failed with: {self._failed}")
        if self._aborted_step:
            raise ControllerStateError(f"state ABORTED: {what}() after abort(); create a new controller per step")

    def _check_not_done(self) -> None:
        if len(self.kept) >= self.target:
            raise ControllerStateError(
                f"state DONE: the step already kept {len(self.kept)}/{self.target} groups; abort the "
                f"{len(self._in_flight)} in-flight groups instead of completing more"
            )

    def _not_in_flight(self, index: int) -> str:
        if not 0 <= index < self.submitted:
            return f"state {self.state}: group {index} was never submitted (submitted: {self.submitted})"
        return f"state {self.state}: group {index} already completed; a group completes once"

    def summary(self) -> dict[str, object]:
        """Counters, as plain data."""
        return {
            "target": self.target,
            "wave_size": self.wave_size,
            "state": self.state,
            "submitted": self.submitted,
            "remaining": self.remaining,
            "waves": self.waves,
            "completed": self.completed,
            "kept": len(self.kept),
            "fallback": len(self.fallback),
            "dropped": self.drop_counts,
            "surplus": len(self.surplus),
            "in_flight": len(self._in_flight),
            "aborted": len(self.aborted),
        }
