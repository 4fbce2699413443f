"""``SpreadSelector``: the ``spread`` rule, which starts the prompts whose pass rate is predicted nearest 50%.

This was ``--selection informative`` until the main job's learner judged it.  It trains
1.36× (fixed waves) to 1.85× (adaptive waves) the informative groups per generated episode
of the seed order, and the policy it trains is **worse** on held-out tasks: 0.75–0.76 against
0.83 eval success at 5,000 generated episodes on ``--products 2000`` (medians of three seeds).
It concentrates: after its exploration it trains about 25–30 prompts over and over (one was
trained at 24 of 30 steps; the seed order's most is 6), and the prompts it picks are not
representative of the task distribution.  It stays for comparison and for the simulator's
bounds; ``informative`` (:class:`~shopsimrl.sampling.skip.SkipOrder`) is the
rule that follows the principle (docs/selection.md).

The rule: observed prompts wait in buckets by estimated difficulty and each pick takes
the oldest prompt of the bucket nearest the skill, where ``q = 1 − ẑ`` is highest.  A
pick takes a never-seen prompt instead when the never-seen prompts left exceed the
pro-rata share of an exploration horizon (``EXPLORE_HORIZON_EPOCHS`` epochs' worth of
picks), so every prompt is tried, or when the best observed prompt's ``q`` is below
``EXPLORE_Q`` (the known prompts have run dry); a share ``RECHECK_SHARE`` of the picks
re-checks the prompt observed the longest ago.  Released prompts go back to the front of
their line: never lost.  With cluster labels observed prompts wait in buckets per cluster
(of the clusters' nearest prompts, those within ``CLUSTER_TIE_LOGITS`` of the nearest
count as equal and the cluster observed the longest ago wins), and an exploring pick
takes its never-seen prompt by cluster (:mod:`~shopsimrl.sampling.clusters`).

Every random draw comes from one seeded ``random.Random`` whose state is part of ``state_dict``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any

from shopsimrl.sampling.estimate import sigmoid, zero_spread_probability
from shopsimrl.sampling.modes import Selection
from shopsimrl.sampling.selector import RuleSelector, epoch_order

#: Width (logits of difficulty) of the buckets observed prompts wait in.
BUCKET_WIDTH = 0.25
#: A prompt predicted to have spread less often than this is "skipped" (counted as such; it waits far from the skill).
SKIP_Q = 0.5
#: Exploration horizon, in epochs' worth of picks (one epoch = as many picks as there are prompts): every prompt
#: is tried within this many picks (plus the re-tries of never-seen prompts that were aborted).  Exploration is
#: paced: a pick explores whenever the never-seen prompts left exceed the pro-rata share of the horizon left, so
#: it stops once everything is covered and late picks are never spent on it.
EXPLORE_HORIZON_EPOCHS = 2.0
#: A pick explores (takes a never-seen prompt) whenever the best observed prompt's predicted q is below this.
EXPLORE_Q = 0.7
#: With labels, the nearest prompts of every cluster within this many logits of the nearest of all count as equal,
#: and the cluster observed the longest ago wins: learning that may not carry is spread over the clusters.
CLUSTER_TIE_LOGITS = 0.5
#: Share of picks that re-check the prompt observed the longest ago.
RECHECK_SHARE = 0.05
#: The outward bucket scan gives way to a scan of every bucket after this many steps (sparse buckets).
_SCAN_LIMIT = 64


def skip_distance(n: int, skip_q: float = SKIP_Q) -> float:
    """The logit distance from 50% beyond which a certain pass rate gives ``q < skip_q`` (bisection)."""
    low, high = 0.0, 50.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        if 1.0 - zero_spread_probability(sigmoid(mid), n) < skip_q:
            high = mid
        else:
            low = mid
    return high


class SpreadSelector(RuleSelector):
    """The prompts whose pass rate is predicted nearest 50%, paced exploration, re-checks (see the module
    docstring)."""

    selection = Selection.SPREAD

    def __init__(
        self,
        *args: Any,
        explore_horizon_epochs: float | None = None,
        recheck_share: float | None = None,
        explore_q: float | None = None,
        **kwargs: Any,
    ) -> None:
        horizon = EXPLORE_HORIZON_EPOCHS if explore_horizon_epochs is None else explore_horizon_epochs
        recheck = RECHECK_SHARE if recheck_share is None else recheck_share
        explore_q = EXPLORE_Q if explore_q is None else explore_q
        if not 0.0 <= explore_q <= 1.0:
            raise ValueError(f"explore_q must be within [0, 1], got {explore_q!r}")
        if not horizon > 0.0:
            raise ValueError(f"explore_horizon_epochs must be > 0, got {horizon!r}")
        if not 0.0 <= recheck <= 1.0:
            raise ValueError(f"recheck_share must be within [0, 1], got {recheck!r}")
        super().__init__(*args, **kwargs)
        self.explore_horizon_epochs = float(horizon)
        self.recheck_share = float(recheck)
        self.explore_q = float(explore_q)
        count = len(self._ids)
        self._horizon = max(1, round(horizon * count))  # picks within which every prompt is tried
        self._picks = 0
        self._skip_distance = skip_distance(self.n)
        self._rng = random.Random(f"shopsimrl-selector/{self.seed}")
        # never-seen prompts in the seed's first-epoch order (with labels they wait in the evidence's cluster book,
        # one line per cluster); observed ones in buckets by difficulty, each an ordered set
        self._unseen: deque[int] = deque() if self.evidence.book is not None else deque(epoch_order(count, self.seed, 0))
        self._buckets: list[dict[int, dict[int, None]]] = [{} for _ in (self.cluster_labels or [None])]  # per cluster
        self._bucket_of: dict[int, int] = {}  # observed prompts out of flight -> their bucket (in their cluster)
        self._age: deque[tuple[int, int]] = deque()  # (prompt, observations) oldest first; stale entries skipped

    @property
    def epoch(self) -> int:
        """Epochs' worth of hand-outs begun (this rule has no order): every ``len(prompts)`` picks."""
        return 1 + self._picks // len(self._ids)

    # -- picking ---------------------------------------------------------------------------------
    def _pick(self, k: int) -> list[int]:
        return [self._pick_one() for _ in range(k)]

    def _pick_one(self) -> int:
        stats = self.evidence.stats
        best = self._nearest()
        best_zero = self._predict(best) if best is not None else 1.0
        best_q = 1.0 - best_zero
        if self._unseen_count() and (best_q < self.explore_q or self._behind_exploration_schedule()):
            book = self.evidence.book
            i = book.explore() if book is not None else self._unseen.popleft()
            stats["explored"] += 1
        else:
            oldest = self._oldest() if best is None or self._rng.random() < self.recheck_share else None
            if oldest is not None:
                i = oldest
                stats["rechecked"] += self._predict(i) > 1.0 - SKIP_Q
            else:
                assert best is not None, "no free prompt: next_prompts checks the count first"
                i = best
            self._unbucket(i)
        self._picks += 1
        return self._take(i, best_zero if i == best else None)

    def _nearest(self) -> int | None:
        """The first prompt of the non-empty bucket nearest the policy's skill (pass rate nearest 50%); with labels,
        the nearest of each cluster's (measured from the skill the cluster meets), the nearest of them."""
        if self.evidence.cluster_of is None:
            return self._nearest_in(0)
        model = self.evidence.model
        candidates: list[tuple[float, int, int]] = []  # (distance from 50%, last observation of the cluster, prompt)
        for c, buckets in enumerate(self._buckets):
            if buckets:
                i = self._nearest_in(c)
                assert i is not None
                candidates.append((abs(model.cluster_skill(c) - model.mean[i]), model.cluster_stamp[c], i))
        if not candidates:
            return None
        closest = min(candidates)[0]
        return min((stamp, i) for distance, stamp, i in candidates if distance <= closest + CLUSTER_TIE_LOGITS)[1]

    def _nearest_in(self, c: int) -> int | None:
        buckets = self._buckets[c]
        if not buckets:
            return None
        where = self.evidence.model.cluster_skill(c) / BUCKET_WIDTH
        centre = math.floor(where)
        step = 1 if where - centre >= 0.5 else -1  # the nearer neighbour first
        for distance in range(_SCAN_LIMIT):
            for key in ((centre,) if distance == 0 else (centre + step * distance, centre - step * distance)):
                bucket = buckets.get(key)
                if bucket:
                    return next(iter(bucket))
        key = min(buckets, key=lambda k: abs(k + 0.5 - where))
        return next(iter(buckets[key]))

    def _oldest(self) -> int | None:
        """The observed prompt out of flight whose last observation is the oldest (stale entries dropped)."""
        age = self._age
        while age:
            entry = age.popleft()
            if self._current(entry):
                return entry[0]
        return None

    def _current(self, entry: tuple[int, int] | list[int]) -> bool:
        i, seen = entry
        return i in self._bucket_of and self.evidence.observed[i] == seen

    def _count_skipped(self) -> int:
        limit = self._skip_distance / BUCKET_WIDTH
        total = 0
        for c, buckets in enumerate(self._buckets):
            if buckets:
                where = self.evidence.model.cluster_skill(c) / BUCKET_WIDTH
                total += sum(len(bucket) for key, bucket in buckets.items() if abs(key + 0.5 - where) > limit)
        return total

    def _rule_stats(self) -> dict[str, float]:
        """``skipped``: observed prompts out of flight whose predicted ``q`` is below ``SKIP_Q`` (a level, judged
        from their bucket)."""
        return {"skipped": float(self._count_skipped())}

    def _unseen_count(self) -> int:
        book = self.evidence.book
        return book.unseen_count() if book is not None else len(self._unseen)

    def _behind_exploration_schedule(self) -> bool:
        """More never-seen prompts left than the horizon's pro-rata share after this pick: explore now."""
        left_after = max(0, self._horizon - self._picks - 1)
        return self._unseen_count() * self._horizon > left_after * len(self._ids)

    # -- out of flight ---------------------------------------------------------------------------
    def _back_in_line(self, i: int, *, front: bool) -> None:
        """A prompt out of flight waits again: observed, in its bucket (released: first); never observed, with
        the unseen (with labels, first in its cluster's line)."""
        ev = self.evidence
        if ev.observed[i]:
            self._place(i, front=front)
        elif ev.book is not None:
            ev.book.put_back(i)
        else:
            self._unseen.appendleft(i)

    def _place(self, i: int, *, front: bool) -> None:
        """An observed prompt out of flight: into the bucket of its difficulty, and into the age line."""
        ev = self.evidence
        key = math.floor(ev.model.mean[i] / BUCKET_WIDTH)
        buckets = self._buckets[ev.cluster_of[i] if ev.cluster_of is not None else 0]
        bucket = buckets.setdefault(key, {})
        if front:
            buckets[key] = {i: None, **bucket}
        else:
            bucket[i] = None
        self._bucket_of[i] = key
        entry = (i, ev.observed[i])
        if front:
            self._age.appendleft(entry)
        else:
            self._age.append(entry)
        if len(self._age) > 4 * len(self._ids) + 64:  # drop stale entries now and then: memory stays O(prompts)
            self._age = deque(e for e in self._age if self._current(e))

    def _unbucket(self, i: int) -> None:
        ev = self.evidence
        key = self._bucket_of.pop(i)
        buckets = self._buckets[ev.cluster_of[i] if ev.cluster_of is not None else 0]
        bucket = buckets[key]
        del bucket[i]
        if not bucket:
            del buckets[key]

    # -- checkpoint ------------------------------------------------------------------------------
    @classmethod
    def _options(cls, rule_state: dict[str, Any]) -> dict[str, Any]:
        return {"explore_horizon_epochs": rule_state["explore_horizon_epochs"],
                "recheck_share": rule_state["recheck_share"], "explore_q": rule_state["explore_q"]}

    def _rule_state(self) -> dict[str, Any]:
        version, internal, gauss = self._rng.getstate()
        return {
            "explore_horizon_epochs": self.explore_horizon_epochs,
            "recheck_share": self.recheck_share,
            "explore_q": self.explore_q,
            "picks": self._picks,
            "unseen": list(self._unseen),
            "buckets": [[c, key, list(bucket)] for c, buckets in enumerate(self._buckets)
                        for key, bucket in buckets.items()],
            "age": [list(entry) for entry in self._age if self._current(entry)],
            "rng": [version, list(internal), gauss],
        }

    def _load_rule_state(self, state: dict[str, Any]) -> None:
        self._picks = int(state["picks"])
        self._unseen = deque(int(i) for i in state["unseen"])
        self._buckets = [{} for _ in (self.cluster_labels or [None])]
        for c, key, bucket in state["buckets"]:
            self._buckets[int(c)][int(key)] = dict.fromkeys(int(i) for i in bucket)
        self._bucket_of = {i: key for buckets in self._buckets for key, bucket in buckets.items() for i in bucket}
        self._age = deque((int(i), int(seen)) for i, seen in state["age"])
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
