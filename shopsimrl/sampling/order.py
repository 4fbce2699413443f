"""``SeedOrder``: the faithful data order, the prompt source of the seed strategy.

slime's data buffer walks the prompt set epoch by epoch, shuffled once per epoch
with the seed; a rollout step takes the next prompts from where the previous one
stopped, nothing skipped.  A prompt met while it is still in flight (a step that
crosses an epoch boundary meets prompts it already started) is deferred and
served first next time: two groups of one prompt in one step would be one group
split in two.  A released prompt (aborted, surplus, technical) is consumed, as in
slime without ``--partial-rollout``.

It keeps the informative selector's evidence and predictions (its base class),
which only size adaptive waves and fill the step metrics: they never change the order.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable
from typing import Any

from shopsimrl.sampling.modes import Strategy
from shopsimrl.sampling.selector import PromptSelector


class SeedOrder(PromptSelector):
    """The prompt set in the seed's shuffled epochs (see the module docstring)."""

    strategy = Strategy.SEED

    def _start(self, order: list[int]) -> None:  # the first epoch is drawn in _new_epoch, as every later one
        self._order: deque[int] = deque()  # the rest of the current epoch pass
        self._deferred: dict[int, None] = {}  # met while in flight: first in line next time (ordered set)

    def next_prompts(self, k: int) -> list[Hashable]:
        """``k`` distinct prompts to start now, in the seed's order; none of them is already in flight."""
        self._require_free(k)
        out: list[int] = []
        in_flight = self._in_flight
        for i in list(self._deferred):
            if len(out) == k:
                break
            if i not in in_flight:
                del self._deferred[i]
                self._hand_out(i, out)
        while len(out) < k:
            if not self._order:
                self._new_epoch()
            i = self._order.popleft()
            if i in in_flight:
                self._deferred[i] = None
                continue
            self._hand_out(i, out)
        return [self._ids[i] for i in out]

    def position(self) -> dict[str, int]:
        """Where the order stands (for logs): epochs started, position in the current one, prompts deferred."""
        position = len(self._ids) - len(self._order) if self.epoch else 0
        return {"epoch": self.epoch, "position": position, "deferred": len(self._deferred)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "order": list(self._order), "deferred": list(self._deferred)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> SeedOrder:
        order = super().from_state_dict(state)
        assert isinstance(order, SeedOrder)
        order._order = deque(int(i) for i in state["order"])
        order._deferred = dict.fromkeys(int(i) for i in state["deferred"])
        return order

    def _hand_out(self, i: int, out: list[int]) -> None:
        if not self._chosen[i]:
            self._stats["explored"] += 1  # the first time this prompt is started
        self._take(i, out)

    def _back_in_line(self, i: int, *, front: bool) -> None:
        """Consumed: a prompt comes back only with its turn in a later epoch."""

    def _new_epoch(self) -> None:
        order = list(range(len(self._ids)))
        random.Random(f"shopsimrl-tasks/{self.seed}/{self.epoch}").shuffle(order)
        self.epoch += 1
        self._order.extend(order)
