"""``SpreadForecast``: a prompt's chance of a zero-spread group before its first group, from its text and labels.

The skip rule (:mod:`~shopsimrl.sampling.skip`) skips only on a prompt's own run of
solved groups, so it cannot act before a prompt's second group: within the first epoch pass, which
is most of a run over a large prompt set, it has nothing to skip.  This model predicts a
rarely-seen prompt's next group from what a trainer knows before rollout:

- **the prompt's description**: its text (the task's instruction) and its labels (the prompt
  data's metadata, e.g. ``category``), never the env's hidden goal nor anything computed from it
  (the caller passes the description; :func:`description_features` reads nothing else);
- **its short history**: ``new`` (never observed), or its one group's verdict (``solved``,
  ``failed``, ``spread``).

**The form**: a multinomial logistic regression (three outcomes: every sibling failed, spread, every
sibling solved; zero spread is either end, so one score per end) on hashed features (the text's words and word
pairs, its numbers by magnitude, its length, each label ``key=value`` (a numeric label, such as a pass rate measured
earlier, by its decile over the prompt set), the history, each history crossed with each label), fitted online by
AdaGrad on every group of a prompt observed at most once before (the groups it predicts), with an L2 pull toward
zero.  The features are scored at ``1/sqrt`` of their number, so a long text weighs no more than a short one; a
numeric label (and its crosses) at full weight, since one measured value is not one word among many.  A prompt with
no description is predicted from its history alone.

**The gate**: the model's prediction is scored before each update (prequentially) against the base
rate (the decayed share of zero-spread groups among the same groups), by the Brier score.  Only when
it has scored ``GATE_MIN_GROUPS`` decayed groups and beats the base rate by ``GATE_MIN_SKILL`` (the
Brier skill score, ``1 − brier / base_brier``) is :meth:`SpreadForecast.ready` true; the rule skips on
the model's word only then.  Where the text and labels carry nothing the model stays at the base rate,
its skill near zero, and the gate stays shut: the rule is today's.

Pure: no I/O, no clock, no random draws; standard library only.  ``state_dict`` holds the weights
and the scores, and a fingerprint of the descriptions it was fitted on (a resumed run with other
descriptions is refused).
"""

from __future__ import annotations

import bisect
import math
import re
import zlib
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from shopsimrl.errors import Refusal

#: Hashed feature slots (2^14): the default catalog's 1,600 instructions have about 2,000 distinct words and pairs.
SLOTS = 1 << 14
#: AdaGrad's step size and the L2 pull toward zero per update (on the weights a group's features touch).
LEARNING_RATE = 0.1
L2 = 1e-3
#: Decay of the base rate and of the two Brier scores per scored group: about the last 200 groups count.
SCORE_DECAY = 0.995
#: Decayed scored groups before the gate may open, and the Brier skill over the base rate it needs.
GATE_MIN_GROUPS = 64.0
GATE_MIN_SKILL = 0.03
#: Groups observed before, below which a prompt is in the forecast's domain (0: never seen; 1: rarely seen).
RARE_GROUPS = 2
#: A numeric label (every value a number, at least this many distinct) is featured by its quantile bucket, of these.
NUMERIC_MIN_DISTINCT = 5
NUMERIC_BUCKETS = 10
#: The key of a description's text; every other key is a label.
TEXT_KEY = "instruction"

_TOKEN = re.compile(r"\$?\d+(?:\.\d+)?|[a-z]+")
#: A prompt's history before a group: never observed, or its one group's outcome.
HISTORY = ("new", "solved", "failed", "spread")
#: A group's outcome: every sibling failed (zero spread), spread, every sibling solved (zero spread).
OUTCOMES = ("failed", "spread", "solved")
CLASSES = len(OUTCOMES)
SPREAD = OUTCOMES.index("spread")


class ForecastStateError(Refusal, ValueError):
    """A saved forecast that does not belong to this prompt set (other prompts or other descriptions)."""


def _slot(name: str) -> int:
    return zlib.crc32(name.encode()) % SLOTS


def _number(token: str) -> str:
    value = float(token.lstrip("$"))
    return ("$" if token.startswith("$") else "#") + str(int(math.log2(value + 1.0)))


def _numeric(value: Any) -> float | None:
    """A label's value as a finite number (a number, or a string that reads as one), else None (booleans are not)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def numeric_edges(descriptions: Mapping[Hashable, Mapping[str, Any]] | None) -> dict[str, list[float]]:
    """The quantile edges of every numeric label (a key whose every value reads as a number, with at least
    ``NUMERIC_MIN_DISTINCT`` distinct values across the prompt set): such a label is featured by its quantile bucket,
    not by its exact value, so a difficulty or pass-rate column in the prompt data carries over to prompts whose exact
    value was never observed."""
    values: dict[str, list[float]] = {}
    other: set[str] = set()
    for description in (descriptions or {}).values():
        for key, value in (description or {}).items():
            if key == TEXT_KEY or value is None or str(value) == "":
                continue
            number = _numeric(value)
            if number is None:
                other.add(key)
            else:
                values.setdefault(key, []).append(number)
    edges = {}
    for key, numbers in values.items():
        if key in other or len(set(numbers)) < NUMERIC_MIN_DISTINCT:
            continue
        ordered = sorted(numbers)
        cuts = {ordered[(len(ordered) * q) // NUMERIC_BUCKETS] for q in range(1, NUMERIC_BUCKETS)}
        edges[key] = sorted(cuts)
    return edges


def description_features(description: Mapping[str, Any] | None,
                         edges: Mapping[str, Sequence[float]] | None = None) -> tuple[list[str], list[str]]:
    """The feature names of a description (text and labels), and the label names history is crossed with.

    ``edges`` (:func:`numeric_edges`): the numeric labels, each featured by its quantile bucket."""
    if not description:
        return [], []
    names: list[str] = []
    text = str(description.get(TEXT_KEY) or "").lower()
    if text:
        words = [_number(t) if t[0] in "$0123456789" else t for t in _TOKEN.findall(text)]
        names += ["w:" + w for w in words]
        names += ["p:" + a + "_" + b for a, b in zip(words, words[1:])]
        names.append(f"len:{min(len(words) // 4, 12)}")
    labels = []
    for key, value in sorted(description.items()):
        if key == TEXT_KEY or value is None or str(value) == "":
            continue
        cuts = (edges or {}).get(key)
        number = _numeric(value) if cuts is not None else None
        labels.append(f"l:{key}={value}" if number is None else f"l:{key}~q{bisect.bisect_right(cuts, number)}")
    return names + labels, labels


def _measured(name: str) -> bool:
    """A numeric label's feature (``l:key~qK``)."""
    return name.startswith("l:") and "~q" in name and "=" not in name


def fingerprint(ids: Sequence[Hashable], descriptions: Mapping[Hashable, Mapping[str, Any]] | None) -> int:
    """A checksum of the prompts and their descriptions, in order (a saved forecast must match it)."""
    check = 0
    for pid in ids:
        d = (descriptions or {}).get(pid) or {}
        check = zlib.crc32(repr((str(pid), sorted((str(k), str(v)) for k, v in d.items()))).encode(), check)
    return check


class SpreadForecast:
    """Online logistic model of a rarely-seen prompt's zero spread (see the module docstring)."""

    def __init__(self, ids: Sequence[Hashable], descriptions: Mapping[Hashable, Mapping[str, Any]] | None) -> None:
        described = descriptions or {}
        self.described = sum(1 for pid in ids if described.get(pid))
        self.fingerprint = fingerprint(ids, descriptions)
        # per prompt: the slots scored at 1/sqrt(their number) (text, labels, history, their crosses) and the slots
        # scored at full weight (each numeric label and its crosses: one measured value, not one word among many)
        self._features: list[tuple[list[int], list[int], list[int], list[int]]] = []
        edges = numeric_edges(described)
        for pid in ids:
            names, labels = description_features(described.get(pid), edges)
            self._features.append(([_slot(n) for n in names if not _measured(n)],
                                   [_slot(lab) for lab in labels if not _measured(lab)],
                                   [_slot(n) for n in names if _measured(n)],
                                   [_slot(lab) for lab in labels if _measured(lab)]))
        self.weights: dict[int, float] = {}
        self.squares: dict[int, float] = {}  # AdaGrad's summed squared gradients per slot
        self.bias = [0.0] * CLASSES
        self.bias_squares = [0.0] * CLASSES
        self.base = [1.0, 2.0]  # decayed (zero-spread groups, groups) in the domain, from a 50% start
        self.brier = [0.0, 0.0]  # decayed (the model's Brier sum, the base rate's Brier sum)
        self.scored = 0.0  # decayed scored groups
        self.step = zero_calibration()

    def _slots(self, i: int, history: str) -> tuple[list[int], list[int]]:
        """The slots of prompt ``i`` with ``history``: (scored at 1/sqrt of their number, scored at full weight)."""
        own, labels, measured, measured_labels = self._features[i]
        h = "h:" + history
        return ([*own, _slot(h), *(_slot(h + "|" + str(lab)) for lab in labels)],
                [*measured, *(_slot(h + "|" + str(lab)) for lab in measured_labels)])

    def _probabilities(self, slots: tuple[list[int], list[int]]) -> list[float]:
        """The chances of the three outcomes (``OUTCOMES``): a softmax over one linear score each."""
        scaled, full = slots
        scale = 1.0 / math.sqrt(len(scaled))
        scores = [self.bias[c] + scale * sum(self.weights.get(s * CLASSES + c, 0.0) for s in scaled)
                  + sum(self.weights.get(s * CLASSES + c, 0.0) for s in full)
                  for c in range(CLASSES)]
        top = max(scores)
        exps = [math.exp(max(-30.0, x - top)) for x in scores]
        total = sum(exps)
        return [e / total for e in exps]

    def predict(self, i: int, history: str) -> float:
        """The chance that prompt ``i``'s next group has zero spread, given its ``history`` (one of ``HISTORY``)."""
        return 1.0 - self._probabilities(self._slots(i, history))[SPREAD]

    def base_rate(self) -> float:
        return self.base[0] / self.base[1]

    def skill(self) -> float:
        """The Brier skill score over the base rate (0 before any group scored)."""
        return 1.0 - self.brier[0] / self.brier[1] if self.brier[1] > 0.0 else 0.0

    def ready(self) -> bool:
        """True once the model has beaten the base rate on enough groups (the rule may skip on its word)."""
        return self.scored >= GATE_MIN_GROUPS and self.skill() >= GATE_MIN_SKILL

    def observe(self, i: int, history: str, outcome: str) -> None:
        """Prompt ``i``'s group (with ``history`` before it) ended ``outcome`` (``failed``, ``spread`` or
        ``solved``): scored as a zero-spread forecast, then fitted."""
        slots = self._slots(i, history)
        probs = self._probabilities(slots)
        target = OUTCOMES.index(outcome)
        p, y = 1.0 - probs[SPREAD], 0.0 if target == SPREAD else 1.0
        base = self.base_rate()
        self.brier = [SCORE_DECAY * self.brier[0] + (p - y) ** 2, SCORE_DECAY * self.brier[1] + (base - y) ** 2]
        self.scored = SCORE_DECAY * self.scored + 1.0
        self.base = [SCORE_DECAY * self.base[0] + y, SCORE_DECAY * self.base[1] + 1.0]
        step = self.step
        step["forecast_groups"] += 1
        step["forecast_predicted_sum"] += p
        step["forecast_observed_sum"] += y
        step["forecast_brier_sum"] += (p - y) ** 2
        step["forecast_base_brier_sum"] += (base - y) ** 2
        scaled, full = slots
        scale = 1.0 / math.sqrt(len(scaled))
        weighted = [*((s, scale) for s in scaled), *((s, 1.0) for s in full)]
        for c in range(CLASSES):
            grad = probs[c] - (1.0 if c == target else 0.0)
            self.bias_squares[c] += grad * grad
            self.bias[c] -= LEARNING_RATE * grad / math.sqrt(self.bias_squares[c] + 1e-8)
            for s, weight in weighted:
                key = s * CLASSES + c
                w = self.weights.get(key, 0.0)
                gs = grad * weight + L2 * w
                sq = self.squares.get(key, 0.0) + gs * gs
                self.squares[key] = sq
                self.weights[key] = w - LEARNING_RATE * gs / math.sqrt(sq + 1e-8)

    def pop_step(self) -> dict[str, float]:
        """The step's calibration sums (reading resets them), with the gate's state now."""
        step, self.step = self.step, zero_calibration()
        return {**step, "forecast_skill": self.skill(), "forecast_ready": float(self.ready())}

    # -- checkpoint ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "weights": [[s, w] for s, w in sorted(self.weights.items())],
                "squares": [[s, q] for s, q in sorted(self.squares.items())], "bias": [list(self.bias), list(self.bias_squares)],
                "base": list(self.base), "brier": list(self.brier), "scored": self.scored, "step": dict(self.step)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["fingerprint"]) != self.fingerprint:
            raise ForecastStateError(
                "the saved spread forecast was fitted on other prompts or other prompt texts and labels than this "
                "run's: resume with the prompt data it was saved with, or start a new run")
        self.weights = {int(s): float(w) for s, w in state["weights"]}
        self.squares = {int(s): float(q) for s, q in state["squares"]}
        self.bias, self.bias_squares = ([float(x) for x in part] for part in state["bias"])
        self.base = [float(x) for x in state["base"]]
        self.brier = [float(x) for x in state["brier"]]
        self.scored = float(state["scored"])
        self.step = {**zero_calibration(), **state["step"]}


def zero_calibration() -> dict[str, float]:
    """The calibration sums of one step (see :meth:`SpreadForecast.pop_step`)."""
    return {"forecast_groups": 0.0, "forecast_predicted_sum": 0.0, "forecast_observed_sum": 0.0,
            "forecast_brier_sum": 0.0, "forecast_base_brier_sum": 0.0}
