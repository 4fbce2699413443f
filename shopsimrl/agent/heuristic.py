"""The embedded default policy: a fast, seeded, stochastic shopper that plays like a model would.

It reads the page (the structured ``Observation.state``; the text carries the same
facts) and answers with one tool call per turn, exactly the ``search`` / ``click``
calls a model emits, so the episode loop, the protocol checker and the traces treat
it like any model.  Every choice is a softmax over hand-made scores at a
temperature: which instruction words go into the query, which result to open,
whether a product is good enough, which option value to pick.  Each choice is one method
(``_keep_word``, ``_choose_result``, ``_accept``, ``_pick_value``), which the learned policy
(:mod:`shopsimrl.learn.policy`) overrides with its own scores.  Siblings (same task,
other seeds) therefore differ, and how much they differ depends on the task: a task
whose product tops the results and whose options are spelled out is nearly always
solved, one whose product hides among look-alikes or on a later page is often
missed.  That spread is what the dynamic-sampling filter needs to see.

Limitations are deliberate and human-like: the shopper never learns the goal beyond
the instruction text, inspects only a few products before it settles, and when the
instruction names no value for an option it tends to leave the first one listed.
Same ``(task, seed, options)`` -> same actions.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from shopsimrl.agent.policy import PolicyTurn, ToolCall, TurnFeedback
from shopsimrl.env.types import Observation, Task

T = TypeVar("T")

_MONEY = re.compile(
    r"\$\s*(\d[\d,]*(?:\.\d+)?)(?:\s*-\s*\$?\s*(\d[\d,]*(?:\.\d+)?))?|(\d[\d,]*(?:\.\d+)?)\s*dollars?\b",
    re.IGNORECASE,
)
_APPROX = re.compile(r"\b(?:around|about|roughly|approximately)\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*")
# Request phrasing, not product words.
_FILLER = frozenset(
    "a an and am are as be buy can find for get help i in is it looking me my need of please price "
    "show sold than that the to unit want with you under less lower more no around about roughly between "
    "range dollars dollar".split()
)
BACK, PREV, NEXT, BUY = "back to search", "< prev", "next >", "buy now"


# Score scales: a softmax at temperature 1 over these is the tuned default behaviour.
_TITLE_WEIGHT = 30.0  # per unit of "share of instruction words in the result's title"
_NAMED_WEIGHT = 25.0  # an option value the instruction names
_DEFAULT_PULL = 2.0  # the first listed value, when the instruction names none (it is the default)
_ACCEPT_SLOPE = 40.0  # logit per unit of product match above the acceptance threshold


@dataclass(frozen=True)
class HeuristicOptions:
    """The heuristic's knobs; the defaults were tuned on the default catalog (docs/agent.md)."""

    temperature: float = 1.0  # divides every score: 0 -> greedy, higher -> more random
    keep_word: float = 0.95  # chance that each instruction word goes into the query
    rank_weight: float = 0.6  # how much a lower-ranked result is avoided, per rank
    price_weight: float = 2.5  # how much a result whose lowest price is over budget is avoided
    patience: int = 1  # products it opens before it settles; 1 = buys the first product it opens
    accept: float = 0.9  # with patience > 1: share of instruction words a product must show
    max_pages: int = 2  # result pages it looks through per query
    seed: int = 0  # mixed into every episode's random stream

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"heuristic option temperature={self.temperature!r} must be >= 0")
        if not 0 < self.keep_word <= 1:
            raise ValueError(f"heuristic option keep_word={self.keep_word!r} must be in (0, 1]")
        if self.patience < 1 or self.max_pages < 1:
            raise ValueError("heuristic options patience and max_pages must be >= 1")


#: Learning mode: each informative group trained on a task halves what is still random in it.
LEARNING_DECAY = 0.5


class HeuristicPolicy:
    """Factory of heuristic episodes; holds immutable options (and, when learning, per-task skill).

    ``learning=True`` (opt-in) stands in for a policy being trained, so the embedded
    default shows what a real run shows: after each informative group trained on a
    task (:meth:`learn`), that task's episodes play with the temperature multiplied by
    ``LEARNING_DECAY`` and with ``1 − keep_word`` multiplied by it too.  The shopper
    grows more consistent on the task, right or wrong, so its groups lose reward
    spread and the zero-spread share rises over steps.
    """

    name = "heuristic"

    def __init__(self, *, learning: bool = False, **options: Any) -> None:
        self.options = HeuristicOptions(**options)
        self.learning = bool(learning)
        self._trained: dict[str, int] = {}  # task id -> informative groups trained on

    def describe(self) -> dict[str, Any]:
        return {**asdict(self.options), "learning": self.learning}

    def skill(self, task_id: str) -> int:
        """Informative groups trained on ``task_id`` so far (0 unless learning)."""
        return self._trained.get(task_id, 0)

    def learn(self, task_ids: Sequence[str]) -> None:
        """One training step on the kept informative groups of these tasks (no-op unless learning)."""
        if self.learning:
            for task_id in task_ids:
                self._trained[task_id] = self._trained.get(task_id, 0) + 1

    def options_for(self, task_id: str) -> HeuristicOptions:
        """The options an episode of ``task_id`` plays with, after what was learned on it."""
        count = self._trained.get(task_id, 0)
        if not count:
            return self.options
        factor = LEARNING_DECAY**count
        return replace(
            self.options,
            temperature=self.options.temperature * factor,
            keep_word=1.0 - (1.0 - self.options.keep_word) * factor,
        )

    def new_episode(self, task: Task, seed: int) -> _HeuristicEpisode:
        return _HeuristicEpisode(self.options_for(task.task_id), task, seed)

    async def aclose(self) -> None:
        return None


@dataclass
class _Request:
    """What the instruction asks for, as the shopper understands it."""

    text: str  # lower-cased instruction without money expressions
    words: list[str]  # its content words, in order, without repeats
    limit: float | None  # highest acceptable price

    @classmethod
    def read(cls, instruction: str) -> _Request:
        limit = None
        amounts: list[float] = []
        for match in _MONEY.finditer(instruction):
            amounts += [float(g.replace(",", "")) for g in match.groups() if g]
        if amounts:
            limit = max(amounts) * (1.1 if _APPROX.search(instruction) else 1.0)
        text = _MONEY.sub(" ", instruction.lower())
        words = [w for w in _WORD.findall(text) if w not in _FILLER]
        return cls(text=" ".join(_WORD.findall(text)), words=list(dict.fromkeys(words)), limit=limit)


@dataclass
class _Memory:
    """What one episode has seen so far."""

    inspected: dict[str, float] = field(default_factory=dict)  # product id -> match score
    queries: int = 0
    pages_seen: int = 0
    calls: int = 0


class _HeuristicEpisode:
    def __init__(self, options: HeuristicOptions, task: Task, seed: int) -> None:
        self._opts = options
        self._rng = random.Random(f"shopsim-heuristic|{options.seed}|{task.task_id}|{seed}")
        self._request = _Request.read(task.instruction)
        self._memory = _Memory()

    async def act(self, observation: Observation, feedback: TurnFeedback | None) -> PolicyTurn:
        state = observation.state
        page = state.get("page")
        if page == "search" or not state.get("clickables"):
            return self._call("search", query=self._query())
        if page == "results":
            return self._call("click", value=self._on_results(state))
        if page == "item":
            return self._call("click", value=self._on_item(state))
        return self._call("click", value=BACK)

    # -- pages -------------------------------------------------------------------------------
    def _query(self) -> str:
        memory = self._memory
        memory.queries += 1
        memory.pages_seen = 0
        words = self._request.words
        kept = [w for i, w in enumerate(words) if self._keep_word(i, w)] or words[-2:]
        return " ".join(kept)

    def _keep_word(self, position: int, word: str) -> bool:
        """Whether the instruction word at ``position`` goes into the query."""
        return self._rng.random() < self._opts.keep_word

    def _on_results(self, state: Mapping[str, Any]) -> str:
        memory = self._memory
        clickables = state.get("clickables", [])
        products = [p for p in state.get("products", []) if p["product_id"] not in memory.inspected]
        if len(memory.inspected) >= self._opts.patience and memory.inspected:
            best = max(memory.inspected, key=memory.inspected.__getitem__)
            if best in clickables:
                return best
        if not products:
            if NEXT in clickables and memory.pages_seen + 1 < self._opts.max_pages:
                memory.pages_seen += 1
                return NEXT
            return BACK
        return self._choose_result(products)["product_id"]

    def _choose_result(self, products: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        """Which of the results not yet opened to open (``products`` in page order)."""
        scores = [self._result_score(p, rank) for rank, p in enumerate(products)]
        return self._sample(products, scores)

    def _result_score(self, product: Mapping[str, Any], rank: int) -> float:
        title = set(_WORD.findall(str(product.get("title", "")).lower()))
        words = self._request.words
        overlap = sum(w in title for w in words) / max(1, len(words))
        score = _TITLE_WEIGHT * overlap - self._opts.rank_weight * rank
        limit, low = self._request.limit, product.get("price_min")
        if limit is not None and isinstance(low, (int, float)) and low > limit:
            score -= self._opts.price_weight
        return score

    def _on_item(self, state: Mapping[str, Any]) -> str:
        product = state.get("product") or {}
        product_id = str(product.get("product_id", ""))
        memory = self._memory
        if product_id not in memory.inspected:
            match = self._product_match(product)
            memory.inspected[product_id] = match
            settled = len(memory.inspected) >= self._opts.patience
            if not settled and not self._accept(product, match):
                return PREV
        missing = list(state.get("missing_axes", []))
        if missing:
            axis = missing[0]
            values = list((product.get("options") or {}).get(axis, []))
            return f"{axis}={self._pick_value(values)}"
        return BUY

    # -- judgement ---------------------------------------------------------------------------
    def _accept(self, product: Mapping[str, Any], match: float) -> bool:
        """Whether a product just opened, before the shopper has settled, is good enough to buy."""
        return self._coin(_ACCEPT_SLOPE * (match - self._opts.accept))

    def _product_match(self, product: Mapping[str, Any]) -> float:
        """Share of the instruction's words this product shows (title, attributes, bullets, options)."""
        parts = [str(product.get("title", "")), " ".join(product.get("attributes", [])),
                 " ".join(product.get("bullets", [])), str(product.get("category", ""))]
        for values in (product.get("options") or {}).values():
            parts.extend(values)
        seen = set(_WORD.findall(" ".join(parts).lower()))
        words = self._request.words
        share = sum(w in seen for w in words) / max(1, len(words))
        limit, low = self._request.limit, product.get("price_min")
        if limit is not None and isinstance(low, (int, float)) and low > limit:
            share -= 0.5
        return share

    def _pick_value(self, values: Sequence[str]) -> str:
        named = [_names(self._request.text, v) for v in values]
        scores = [_NAMED_WEIGHT * n + (_DEFAULT_PULL if i == 0 and not any(named) else 0.0) for i, n in enumerate(named)]
        return self._sample(values, scores)

    # -- randomness --------------------------------------------------------------------------
    def _sample(self, items: Sequence[T], scores: Sequence[float]) -> T:
        temperature = self._opts.temperature
        if temperature == 0:
            return items[max(range(len(items)), key=scores.__getitem__)]
        top = max(scores)
        weights = [math.exp((s - top) / temperature) for s in scores]
        return self._rng.choices(items, weights=weights)[0]

    def _coin(self, logit: float) -> bool:
        """True with probability sigmoid(logit / temperature)."""
        temperature = self._opts.temperature
        if temperature == 0:
            return logit >= 0
        return self._rng.random() < 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, logit / temperature))))

    def _call(self, name: str, **arguments: str) -> PolicyTurn:
        self._memory.calls += 1
        call = ToolCall(name=name, arguments=json.dumps(arguments), id=f"call_{self._memory.calls}")
        return PolicyTurn(text=None, tool_calls=(call,), finish_reason="tool_calls")


def _names(text: str, value: str) -> bool:
    """Whether ``value`` appears in ``text`` as a whole phrase ("9" is not named by "9.5")."""
    phrase = " ".join(_WORD.findall(value.lower()))
    return bool(phrase) and re.search(rf"(?<![\w.]){re.escape(phrase)}(?![\w.])", text) is not None
