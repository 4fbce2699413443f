"""``check_selector``: what every selector must do, checked the way Gymnasium's ``check_env`` checks an env.

A rollout step trusts its :class:`~shopsimrl.sampling.source.Selector` for a few promises
(``source.py`` states them); a source that breaks one starts a prompt twice in a step, loses a
prompt, or feeds a wave sizer a chance outside [0, 1].  :func:`check_selector` runs a fresh
source through each promise and raises :class:`SourceContractError` naming the first one broken:

- ``next_prompts(k)``: ``k`` distinct, hashable prompts, none of them in flight;
- ``next_prompt()``: one prompt not in flight, and a chance of spread within [0, 1];
- ``predicted_zero_spread`` / ``predicted_logit``: ``None``, or a probability / a finite mean and a
  variance >= 0;
- ``weight``: a finite number >= 1 for every prompt in flight;
- ``skipped_turns``: an integer >= 0 that never decreases (adaptive waves count a step's skips by it);
- ``settle`` and ``release`` take a prompt out of flight: it can be handed out again;
- a whole step, fixed and adaptive waves (:func:`~shopsimrl.sampling.step.new_step`), never starts one
  prompt twice, and every prompt it started is out of flight once it closed.

Pure: the source is driven with made-up results, no clock, no I/O.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable
from typing import Any

from shopsimrl.errors import InvariantBroken
from shopsimrl.sampling.pump import Hooks, pump
from shopsimrl.sampling.source import Selector
from shopsimrl.sampling.step import Start, new_step
from shopsimrl.sampling.verdict import Verdict


class SourceContractError(InvariantBroken, AssertionError):
    """A selector broke one of the promises a rollout step relies on (the message says which)."""


def _require(ok: bool, promise: str) -> None:
    if not ok:
        raise SourceContractError(promise)


def _check_predictions(source: Selector, prompt: Hashable) -> None:
    zero = source.predicted_zero_spread(prompt)
    _require(zero is None or (isinstance(zero, float | int) and 0.0 <= zero <= 1.0),
             f"predicted_zero_spread({prompt!r}) must be None or within [0, 1], got {zero!r}")
    logit = source.predicted_logit(prompt)
    if logit is not None:
        mean, var = logit
        _require(math.isfinite(mean) and math.isfinite(var) and var >= 0.0,
                 f"predicted_logit({prompt!r}) must be None or (finite mean, variance >= 0), got {logit!r}")


def _hand_out_twice(source: Selector, k: int) -> None:
    """Two batches while the first is in flight: disjoint; released, the first can come back."""
    first = source.next_prompts(k)
    _require(len(first) == k, f"next_prompts({k}) must give {k} prompts, gave {len(first)}")
    _require(len(set(first)) == k, f"next_prompts({k}) gave a prompt twice: {list(first)!r}")
    second = source.next_prompts(k)
    _require(not set(first) & set(second),
             f"next_prompts handed out prompts already in flight: {sorted(map(str, set(first) & set(second)))}")
    prompt, chance = source.next_prompt()
    _require(prompt not in set(first) | set(second), f"next_prompt() handed out {prompt!r}, already in flight")
    _require(isinstance(chance, float | int) and 0.0 <= chance <= 1.0,
             f"next_prompt() must give a chance of spread within [0, 1], got {chance!r}")
    for p in [*first, *second, prompt]:
        _check_predictions(source, p)
        weight = source.weight(p)
        _require(isinstance(weight, float | int) and math.isfinite(weight) and weight >= 1.0,
                 f"weight({p!r}) must be a finite number >= 1, got {weight!r}")
    for p in first:
        source.settle(p, [0.0, 1.0])  # recorded: out of flight
    for p in second:
        source.settle(p, None)  # unscored: released
    source.release(prompt)
    again = source.next_prompts(3 * k)  # everything is out of flight: a batch as large as all three fits
    _require(len(set(again)) == 3 * k, f"after settle/release, next_prompts({3 * k}) gave {len(set(again))} "
                                       "distinct prompts")
    for p in again:
        source.release(p)


def _one_step(source: Selector, waves: str, seed: int) -> None:
    """A step of random results: no prompt started twice; none in flight once closed (the next ask sees all)."""
    skipped = source.skipped_turns
    _require(isinstance(skipped, int) and skipped >= 0, f"skipped_turns must be an integer >= 0, got {skipped!r}")
    shell = _RandomResults(random.Random(seed))
    pump(new_step(4, 8, 4, source=source, waves=waves, max_consecutive_failed_groups=10**6), shell)
    started = shell.started
    _require(isinstance(source.skipped_turns, int) and source.skipped_turns >= skipped,
             f"skipped_turns went from {skipped} to {source.skipped_turns!r} in a step: it must never decrease")
    twice = {str(p) for p in started if started.count(p) > 1}
    _require(not twice, f"a {waves}-wave step started prompts twice: {sorted(twice)}")
    _hand_out_twice(source, 2)


class _RandomResults(Hooks):
    """The check's shell: one group at a time, picked at random among those in flight, comes back with a random
    verdict (and made-up rewards)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.started: list[Any] = []  # every prompt a Start named
        self.flying: list[int] = []

    def now(self) -> float:
        return 0.0

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        self.started.append(start.prompt)
        self.flying.append(start.index)

    def next_finished(self) -> list[int] | None:
        if not self.flying:
            return None
        return [self.flying.pop(self.rng.randrange(len(self.flying)))]

    def measure(self, index: int) -> tuple[Verdict, list[float] | None]:
        kind = self.rng.choice([Verdict.VARIED, Verdict.ZERO_STD, Verdict.TECHNICAL])
        return kind, None if kind is Verdict.TECHNICAL else ([0.0, 1.0] if kind is Verdict.VARIED else [1.0, 1.0])

    def measure_first_k(self, index: int) -> list[float | None]:
        raise SourceContractError("the check starts every group whole")

    def cancel(self, indices: tuple[int, ...]) -> None:
        """Nothing runs: the groups in flight are simply never finished."""

    def stopping(self, error: Exception, t: float) -> None:
        _require(False, "the step stopped on technical groups it was never told of")


def check_selector(make: Callable[[], Selector], *, seed: int = 0) -> None:
    """Run fresh sources from ``make`` (each over at least 40 prompts, 4 siblings a group) through every promise
    of the contract (module docstring); raises :class:`SourceContractError` on the first one broken."""
    _hand_out_twice(make(), 4)
    for waves in ("fixed", "adaptive"):
        source = make()
        for step in range(3):  # the second and third steps run on what the first ones taught the source
            _one_step(source, waves, seed + step)
