"""``SeedOrder``: the faithful data order, the selector of the seed selection.

slime's data buffer walks the prompt set epoch by epoch, shuffled once per epoch
with the seed; a rollout step takes the next prompts from where the previous one
stopped, nothing skipped.  A prompt met while it is still in flight (a step that
crosses an epoch boundary meets prompts it already started) is deferred and
served first next time: two groups of one prompt in one step would be one group
split in two.  A released prompt (aborted, surplus, technical) is consumed, as in
slime without ``--partial-rollout``.

It keeps the shared evidence (:class:`~shopsimrl.sampling.evidence.Evidence`) like every
source: the predictions only size adaptive waves and fill the step metrics, they never
change the order.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from shopsimrl.sampling.modes import Selection
from shopsimrl.sampling.selector import RuleSelector, epoch_order, take_deferred


class SeedOrder(RuleSelector):
    """The prompt set in the seed's shuffled epochs (see the module docstring)."""

    selection = Selection.SEED

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epoch = 0  # epoch passes begun; the first is drawn at the first pick, as every later one
        self._order: deque[int] = deque()  # the rest of the current epoch pass
        self._deferred: dict[int, None] = {}  # met while in flight: first in line next time (ordered set)

    @property
    def epoch(self) -> int:
        return self._epoch

    def _pick(self, k: int) -> list[int]:
        out: list[int] = []
        in_flight = self.evidence.in_flight
        for i in take_deferred(self._deferred, in_flight, lambda: len(out) < k):
            out.append(self._hand_out(i))
        while len(out) < k:
            if not self._order:
                self._new_epoch()
            i = self._order.popleft()
            if i in in_flight:
                self._deferred[i] = None
                continue
            out.append(self._hand_out(i))
        return out

    def position(self) -> dict[str, int]:
        """Where the order stands (for logs): epochs started, position in the current one, prompts deferred."""
        position = len(self._ids) - len(self._order) if self._epoch else 0
        return {"epoch": self._epoch, "position": position, "deferred": len(self._deferred)}

    def _rule_state(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "order": list(self._order), "deferred": list(self._deferred)}

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._epoch = int(state["epoch"])
        self._order = deque(int(i) for i in state["order"])
        self._deferred = dict.fromkeys(int(i) for i in state["deferred"])

    def _hand_out(self, i: int) -> int:
        if not self.evidence.chosen[i]:
            self.evidence.stats["explored"] += 1  # the first time this prompt is started
        return self._take(i)

    def _back_in_line(self, i: int, *, front: bool) -> None:
        """Consumed: a prompt comes back only with its turn in a later epoch."""

    def _new_epoch(self) -> None:
        self._order.extend(epoch_order(len(self._ids), self.seed, self._epoch))
        self._epoch += 1
