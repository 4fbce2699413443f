"""The policy's one parameter vector: named features in blocks, one block per kind of choice.

A choice scores each candidate as ``theta[block] . features``; the features that carry
the heuristic's hand-made scores are scaled so that ``theta = 1`` reproduces them, and the
features it does not use start at 0.  So the untrained policy plays like the heuristic at
temperature 1, and Adam's step size means the same thing for every weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shopsimrl.agent.heuristic import HeuristicOptions

_H = HeuristicOptions()
#: Heuristic scales carried by features (``theta = 1`` at the start reproduces the heuristic).
KEEP_LOGIT = math.log(_H.keep_word / (1.0 - _H.keep_word))  # 0.95 -> 2.94
BUY_LOGIT = 4.0  # the heuristic buys the first product it opens; the learned shopper starts at 98 %

#: block -> feature names (candidate and goal features; see ``policy``).
BLOCKS: dict[str, tuple[str, ...]] = {
    "query": ("keep", "digit", "position", "short"),
    "result": ("title_share", "rank", "over_budget", "title_precision", "top"),
    "buy": ("bias", "match_gap", "over_budget", "inspected"),
    "option": ("named", "default", "first", "word_share"),
}
#: Features that carry a heuristic score and start at 1; all others start at 0.
_ONE = {("query", "keep"), ("result", "title_share"), ("result", "rank"), ("result", "over_budget"),
        ("buy", "bias"), ("option", "named"), ("option", "default")}


@dataclass(frozen=True)
class Layout:
    """Where each block's weights sit in the vector."""

    offsets: dict[str, int]
    size: int

    @classmethod
    def build(cls) -> Layout:
        offsets, at = {}, 0
        for block, names in BLOCKS.items():
            offsets[block] = at
            at += len(names)
        return cls(offsets, at)

    def slice(self, block: str) -> slice:
        start = self.offsets[block]
        return slice(start, start + len(BLOCKS[block]))

    def names(self) -> list[str]:
        return [f"{block}.{name}" for block, names in BLOCKS.items() for name in names]

    def initial(self) -> list[float]:
        return [1.0 if (block, name) in _ONE else 0.0 for block, names in BLOCKS.items() for name in names]


LAYOUT = Layout.build()
