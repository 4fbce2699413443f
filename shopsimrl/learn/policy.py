"""The learned shopper: the heuristic's four choices drawn from a softmax over linear scores.

An episode plays the heuristic's page logic (:class:`~shopsimrl.agent.heuristic.HeuristicPolicy`)
with its four choices overridden: each builds one feature row per candidate, scores the
rows with the block's weights of the shared vector, and draws from the softmax (or takes
the best, when greedy).  Every draw is recorded with its candidates' features and its
log-probability, keyed by ``(task_id, seed)``, so the trainer can find the decisions of
each kept episode by the batch's ``task_id`` and ``seed`` columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shopsimrl.agent.heuristic import (
    _DEFAULT_PULL,
    _NAMED_WEIGHT,
    _TITLE_WEIGHT,
    _WORD,
    HeuristicOptions,
    _HeuristicEpisode,
    _names,
)
from shopsimrl.defaults import MAX_INSPECTED
from shopsimrl.env.types import Task
from shopsimrl.learn.params import BLOCKS, BUY_LOGIT, KEEP_LOGIT, LAYOUT

_OPTIONS = HeuristicOptions(patience=MAX_INSPECTED)  # patience: products opened before it buys the best seen
_NO = {block: (0.0,) * len(names) for block, names in BLOCKS.items()}  # the "no" side of a yes/no choice


@dataclass(frozen=True, slots=True)
class Draw:
    """One draw: the block, one feature row per candidate, the candidate taken, its log-probability then."""

    block: str
    features: tuple[tuple[float, ...], ...]
    chosen: int
    logp: float


EpisodeKey = tuple[str, int]  # (task_id, episode seed)


class LinearPolicy:
    """Factory of learned-shopper episodes under one parameter vector (``theta``, a list of floats).

    ``greedy``: every choice takes the best-scored candidate (evaluation).  ``record``: keep
    each episode's decisions until :meth:`take_records` (training episodes only).
    """

    name = "linear"

    def __init__(self, theta: Sequence[float] | None = None, *, greedy: bool = False, record: bool = True) -> None:
        self.greedy = greedy
        self.record = record
        self.updates = 0  # optimizer updates the current parameters have had (for traces)
        self._records: dict[EpisodeKey, list[Draw]] = {}
        self.set_theta(LAYOUT.initial() if theta is None else theta)

    def set_theta(self, theta: Sequence[float], updates: int | None = None) -> None:
        """New parameters: episodes started from now on play with them."""
        values = [float(x) for x in theta]
        if len(values) != LAYOUT.size:
            raise ValueError(f"the policy has {LAYOUT.size} parameters, got {len(values)}")
        if not all(math.isfinite(x) for x in values):
            raise ValueError("the policy's parameters must be finite numbers (a NaN or an infinity was given)")
        self.theta = values
        self._weights = {block: tuple(values[LAYOUT.slice(block)]) for block in BLOCKS}
        if updates is not None:
            self.updates = updates

    def view(self, *, greedy: bool) -> LinearPolicy:
        """A non-recording copy with the same parameters (evaluation)."""
        other = LinearPolicy(self.theta, greedy=greedy, record=False)
        other.updates = self.updates
        return other

    def take_records(self) -> dict[EpisodeKey, list[Draw]]:
        """Every recorded episode's decisions since the last call (then forgotten)."""
        records, self._records = self._records, {}
        return records

    def describe(self) -> dict[str, Any]:
        return {"policy": "linear", "parameters": LAYOUT.size, "greedy": self.greedy, "updates": self.updates}

    def new_episode(self, task: Task, seed: int) -> _LinearEpisode:
        decisions: list[Draw] | None = None
        if self.record:
            decisions = self._records.setdefault((task.task_id, seed), [])
            decisions.clear()  # a rerun of the same episode replaces its record
        return _LinearEpisode(task, seed, self._weights, self.greedy, decisions)

    async def aclose(self) -> None:
        return None


class _LinearEpisode(_HeuristicEpisode):
    def __init__(self, task: Task, seed: int, weights: Mapping[str, tuple[float, ...]], greedy: bool,
                 decisions: list[Draw] | None) -> None:
        super().__init__(_OPTIONS, task, seed)
        self._weights = weights
        self._greedy = greedy
        self._decisions = decisions

    # -- the four choices ----------------------------------------------------------------------
    def _keep_word(self, position: int, word: str) -> bool:
        n = len(self._request.words)
        row = (KEEP_LOGIT, float(any(c.isdigit() for c in word)), position / max(1, n - 1), float(len(word) <= 3))
        return self._decide("query", (row, _NO["query"])) == 0

    def _choose_result(self, products: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        words = self._request.words
        rows = []
        for rank, product in enumerate(products):
            title = _WORD.findall(str(product.get("title", "")).lower())
            title_set = set(title)
            shared = sum(w in title_set for w in words)
            rows.append((
                _TITLE_WEIGHT * shared / max(1, len(words)),
                -_OPTIONS.rank_weight * rank,
                -_OPTIONS.price_weight * self._over_budget(product),
                sum(t in words for t in title) / max(1, len(title)),
                float(rank == 0),
            ))
        return products[self._decide("result", rows)]

    def _accept(self, product: Mapping[str, Any], match: float) -> bool:
        inspected = len(self._memory.inspected) - 1  # this product is already counted
        row = (BUY_LOGIT, 10.0 * (min(match, 1.0) - 1.0), self._over_budget(product), float(inspected))
        return self._decide("buy", (row, _NO["buy"])) == 0

    def _pick_value(self, values: Sequence[str]) -> str:
        text = self._request.text
        named = [_names(text, v) for v in values]
        said = set(_WORD.findall(text))
        rows = []
        for i, (value, n) in enumerate(zip(values, named)):
            tokens = _WORD.findall(value.lower())
            rows.append((
                _NAMED_WEIGHT * n,
                _DEFAULT_PULL * (i == 0 and not any(named)),
                float(i == 0),
                sum(t in said for t in tokens) / max(1, len(tokens)),
            ))
        return values[self._decide("option", rows)]

    # -- the softmax -----------------------------------------------------------------------------
    def _over_budget(self, product: Mapping[str, Any]) -> float:
        limit, low = self._request.limit, product.get("price_min")
        return float(limit is not None and isinstance(low, (int, float)) and low > limit)

    def _decide(self, block: str, rows: Sequence[tuple[float, ...]]) -> int:
        """Draw a candidate from softmax(rows . w) (greedy: the best), and record the draw."""
        w = self._weights[block]
        scores = [sum(a * b for a, b in zip(w, row)) for row in rows]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        if self._greedy:
            chosen = scores.index(top)
        else:
            u = self._rng.random() * total
            chosen, acc = len(weights) - 1, 0.0
            for i, weight in enumerate(weights):
                acc += weight
                if u < acc:
                    chosen = i
                    break
        if self._decisions is not None:
            logp = scores[chosen] - top - math.log(total)
            self._decisions.append(Draw(block, tuple(tuple(map(float, r)) for r in rows), chosen, logp))
        return chosen
