"""The supply ``replay`` runs on: groups in submission order, each with its verdict and generation time.

Group ``i`` of a step plays supply item ``i``; a wave the supply cannot fill ends the replay
with :class:`SupplyExhausted`, which says where the step stood when it ran short.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence

from shopsimrl.errors import Interrupted
from shopsimrl.sampling.controller import WaveController
from shopsimrl.sampling.verdict import Verdict


class SupplyExhausted(Interrupted, RuntimeError):
    """A wave was needed but the supply has fewer groups than the wave submits."""


def parse_supply(groups: Iterable[tuple[Verdict | str, float]]) -> list[tuple[Verdict, float]]:
    """``(verdict, duration)`` pairs, checked: a known verdict and a finite duration >= 0 (``ValueError``)."""
    supply = []
    for i, item in enumerate(groups):
        try:
            verdict, duration = item
        except (TypeError, ValueError):
            raise ValueError(f"supply item {i} must be (verdict, duration), got {item!r}") from None
        d = float(duration)
        if not math.isfinite(d) or d < 0:
            raise ValueError(f"supply item {i}: duration must be a finite number >= 0, got {duration!r}")
        supply.append((verdict if type(verdict) is Verdict else Verdict.parse(verdict), d))
    return supply


class SupplyShort(Interrupted):
    """Raised by :class:`SupplyOrder` mid-step; ``replay`` turns it into :class:`SupplyExhausted` with the
    controller's counts (the source does not see them)."""

    def __init__(self, first: int, count: int, size: int) -> None:
        self.first, self.count, self.size = first, count, size

    def exhausted(self, controller: WaveController, now: float) -> SupplyExhausted:
        return SupplyExhausted(
            f"wave {controller.waves} needs groups {self.first}..{self.first + self.count - 1} "
            f"at t={now:g}, but the supply has only {self.size} groups "
            f"(kept {len(controller.kept)}/{controller.target}, remaining {controller.remaining - self.count})"
        )


class SupplyOrder:
    """The replay's selector: hands out supply items in order; there is nothing to learn.

    ``size``: the supply's length (``None``: no end, the groups of a recorded step, named by their index)."""

    skipped_turns = 0  # it skips nothing

    def __init__(self, size: int | None) -> None:
        self.size = size
        self.handed = 0

    def next_prompts(self, k: int) -> range:
        first = self.handed
        if self.size is not None and first + k > self.size:
            raise SupplyShort(first, k, self.size)
        self.handed = first + k
        return range(first, first + k)

    def next_prompt(self) -> tuple[Hashable, float]:
        raise NotImplementedError("replay opens whole waves only")

    def settle(self, prompt_id: Hashable, rewards: Sequence[float] | None, *, surplus: bool = False) -> None:
        return None

    def release(self, prompt_id: Hashable, rewards: Sequence[float] | None = None) -> None:
        return None

    def predicted_zero_spread(self, prompt_id: Hashable) -> None:
        return None

    def predicted_logit(self, prompt_id: Hashable) -> None:
        return None
