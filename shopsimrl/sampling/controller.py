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
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from types import MappingProxyType
from typing import NamedTuple

from shopsimrl.defaults import (
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_ROLLOUT_BATCH_SIZE,
)
from shopsimrl.errors import InvariantBroken
from shopsimrl.sampling.filter import DROP_REASONS, FILTER_OUTPUTS, REASON_TECHNICAL, should_drop
from shopsimrl.sampling.guard import ConsecutiveFailureGuard, TooManyTechnicalFailures
from shopsimrl.sampling.knobs import validate_wave_knobs
from shopsimrl.sampling.verdict import Verdict


class Decision(str, Enum):
    """What became of one completed group.  *Kept* (entered the batch) = ``ACCEPTED`` + ``FALLBACK``."""

    ACCEPTED = "accepted"  # kept, with reward spread (the only groups that carry a gradient)
    FALLBACK = "fallback"  # kept through keep_when_insufficient (zero-std, remaining <= target)
    DROPPED = "dropped"  # really dropped: remaining -= 1
    SURPLUS = "surplus"  # not dropped, but data was already full: never trained


class GroupDecision(NamedTuple):
    """The controller's answer for one completed group."""

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


class State(str, Enum):
    """Where one step's wave loop stands; ``str(state)`` is its name (``"WAITING"``), as logs show it."""

    NEEDS_WAVE = "NEEDS_WAVE"  # remaining < target and not done: slime's inner loop opens a wave
    WAITING = "WAITING"  # groups in flight cover the target: wait for completions
    DONE = "DONE"  # target groups kept: abort what is still in flight
    ABORTED = "ABORTED"  # abort() ended the step: final
    FAILED = "FAILED"  # the consecutive-failure stop fired: only abort() is left

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def _table(rows: dict[State, dict[str, tuple[State, ...]]]) -> Mapping[State, Mapping[str, frozenset[State]]]:
    """Read-only, so the protocol cannot be changed at run time."""
    return MappingProxyType(
        {state: MappingProxyType({op: frozenset(to) for op, to in ops.items()}) for state, ops in rows.items()}
    )


_NW, _W, _D, _A, _F = State.NEEDS_WAVE, State.WAITING, State.DONE, State.ABORTED, State.FAILED
TRANSITIONS: Mapping[State, Mapping[str, frozenset[State]]] = _table({
    # state: {operation it allows: the states that operation can lead to}
    # kept <= remaining (a kept group is never dropped), so remaining < target means the step cannot be done
    _NW: {"submit": (_W,), "refill": (_NW, _W), "complete": (_NW, _F), "complete_batch": (_NW, _F), "abort": (_A,)},
    _W: {"submit": (_W,), "refill": (_W,), "complete": (_W, _NW, _D, _F), "complete_batch": (_W, _NW, _D, _F),
         "abort": (_A,)},
    _D: {"submit": (_D,), "abort": (_A,)},
    _F: {"abort": (_F,)},
    _A: {"abort": (_A,)},
})
"""The protocol, the one place it is written: every operation a state allows, and where it can lead.

``submit()`` outside ``NEEDS_WAVE`` is slime's inner loop running zero times (an empty range);
``abort()`` is allowed everywhere and is idempotent; a failed step stays ``FAILED``.  The methods
refuse anything else with :class:`ControllerStateError`, and ``docs/sampling.md`` draws its
diagram from this table (``scripts/state_diagram.py``).
"""

INITIAL_STATE = State.NEEDS_WAVE  # a new controller: nothing submitted, remaining 0 < target
ALLOWED: Mapping[State, frozenset[str]] = MappingProxyType({s: frozenset(ops) for s, ops in TRANSITIONS.items()})
OPERATIONS: tuple[str, ...] = ("submit", "refill", "complete", "complete_batch", "abort")  # the table's column order


class ControllerStateError(InvariantBroken, RuntimeError):
    """The controller was driven out of protocol; the message names the state and what it allows."""


class WaveController:
    """One rollout step's wave loop.  Create one per step; share the guard across steps."""

    def __init__(
        self,
        rollout_batch_size: int = DEFAULT_ROLLOUT_BATCH_SIZE,
        over_sampling_batch_size: int = DEFAULT_OVER_SAMPLING_BATCH_SIZE,
        max_consecutive_failed_groups: int | None = None,
        *,
        guard: ConsecutiveFailureGuard | None = None,
        group_name: Callable[[int], object] | None = None,
    ) -> None:
        """Give either ``guard`` (a streak shared across steps) or ``max_consecutive_failed_groups``
        (a fresh guard for this step, default 8), not both: the guard carries its own limit.  ``group_name``:
        what the stop's message calls group ``index`` (default: the index)."""
        validate_wave_knobs(rollout_batch_size, over_sampling_batch_size)
        if guard is not None and max_consecutive_failed_groups is not None:
            raise ValueError(
                f"pass either guard= (limit {guard.limit}, shared across steps) or max_consecutive_failed_groups="
                f"{max_consecutive_failed_groups} (a new guard for this step), not both: the guard has its own limit"
            )
        self.target = rollout_batch_size
        self.wave_size = over_sampling_batch_size
        if guard is None:
            limit = max_consecutive_failed_groups
            guard = ConsecutiveFailureGuard(DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS if limit is None else limit)
        self.guard = guard
        self.group_name = group_name
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
    def state(self) -> State:
        if self._failed is not None:
            return State.FAILED
        if self._aborted_step:
            return State.ABORTED
        if self.done:
            return State.DONE
        if self.remaining < self.target:
            return State.NEEDS_WAVE
        return State.WAITING

    @property
    def needs_wave(self) -> bool:
        """slime's inner-loop condition (``remaining < target``, step live and not done): call ``submit()`` now."""
        return self.state is State.NEEDS_WAVE

    @property
    def allowed(self) -> frozenset[str]:
        """The operations the current state allows (:data:`ALLOWED`)."""
        return ALLOWED[self.state]

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
        self._require("submit")
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
        self._require("refill")
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
        self._require("complete")
        (decision,) = self._decide_each(self._checked([(int(index), Verdict.parse(verdict))]))
        return decision

    def complete_batch(self, completions: Iterable[tuple[int, Verdict | str]]) -> list[GroupDecision]:
        """Groups that finished together: each is filtered and counted, in submission order.

        A group processed after ``data`` filled up in the same batch is still
        filtered (a drop still counts); if not dropped it is surplus.
        """
        self._require("complete_batch")
        return self._decide_each(self._checked(sorted((int(i), Verdict.parse(v)) for i, v in completions)))

    def complete_in_order(self, completions: Iterable[tuple[int, Verdict | str]]) -> list[GroupDecision]:
        """Groups that finished together, decided in the order given instead of submission order.

        slime's own loop filters a batch in the order of asyncio's done set; checking a real run
        against the controller replays that order.  Otherwise as :meth:`complete_batch` (the same
        operation in :data:`TRANSITIONS`); a stop's ``decisions`` are in the order given.
        """
        self._require("complete_batch")
        return self._decide_each(self._checked([(int(i), Verdict.parse(v)) for i, v in completions]))

    def _checked(self, batch: list[tuple[int, Verdict]]) -> list[tuple[int, Verdict]]:
        """``batch``, once every group in it is in flight and none appears twice (nothing is decided before)."""
        seen: set[int] = set()
        for index, _verdict in batch:
            if index not in self._in_flight:
                raise ControllerStateError(self._not_in_flight(index))
            if index in seen:
                raise ControllerStateError(f"group {index} appears twice in one batch")
            seen.add(index)
        return batch

    def _decide_each(self, batch: list[tuple[int, Verdict]]) -> list[GroupDecision]:
        """Decide a checked batch in its order; a consecutive-failure stop carries the batch's decisions so far."""
        decided: list[GroupDecision] = []
        try:
            for index, verdict in batch:
                self._in_flight.discard(index)
                decided.append(self._decide(index, verdict))
        except TooManyTechnicalFailures as exc:
            exc.decisions = (*decided, self._stopped_by(index))
            raise
        return decided

    def _stopped_by(self, index: int) -> GroupDecision:
        """The group that fired the consecutive-failure stop: technical, dropped (the step ends on it, so
        ``remaining`` is left as it was)."""
        return GroupDecision(index, bisect_right(self._wave_starts, index), Verdict.TECHNICAL, Decision.DROPPED,
                             REASON_TECHNICAL, self.remaining, len(self.kept))

    def _decide(self, index: int, verdict: Verdict) -> GroupDecision:
        """Filter one group just taken out of flight and apply slime's drop rule."""
        self.completed += 1
        try:
            self.guard.observe(verdict, index if self.group_name is None else self.group_name(index))
        except BaseException as exc:
            self._failed = exc
            raise
        output = FILTER_OUTPUTS[verdict]
        if should_drop(output, self.remaining, self.target):
            self.remaining -= 1
            self.dropped[output.reason].append(index)  # type: ignore[index]
            decision = Decision.DROPPED
        elif len(self.kept) < self.target:
            self.kept.append(index)
            if output.keep:
                decision = Decision.ACCEPTED
            else:
                self.fallback.append(index)
                decision = Decision.FALLBACK
        else:
            self.surplus.append(index)
            decision = Decision.SURPLUS
        return GroupDecision(index, self.wave_of(index), verdict, decision, output.reason, self.remaining,
                             len(self.kept))

    def abort(self) -> list[int]:
        """End the step: every in-flight group is aborted (never trained, never counted as completed)."""
        self._require("abort")
        aborted = sorted(self._in_flight)
        self.aborted.extend(aborted)
        self._in_flight.clear()
        self._aborted_step = True
        return aborted

    # -- helpers -------------------------------------------------------------------------------
    def _require(self, operation: str) -> None:
        """Refuse an operation the current state does not allow (the table :data:`TRANSITIONS`)."""
        state = self.state
        allowed = ALLOWED[state]
        if operation in allowed:
            return
        if state is State.DONE:
            why = (f"the step already kept {len(self.kept)}/{self.target} groups; abort the "
                   f"{len(self._in_flight)} in-flight groups instead")
        elif state is State.FAILED:
            why = f"the step failed with: {self._failed}"
        else:
            why = "the step was aborted; create a new controller per step"
        names = ", ".join(f"{op}()" for op in OPERATIONS if op in allowed)
        raise ControllerStateError(
            f"state {state}: {operation}() is not allowed ({why}); state {state} allows: {names}"
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
