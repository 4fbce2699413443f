"""``PromptSelector``: the informative selector, which prompts to start next, learned from the groups that finished.

It is one of the two prompt sources (:class:`~shopsimrl.sampling.source.PromptSource`, one contract:
``next_prompts`` / ``next_prompt`` / ``settle`` / ``record`` / ``release`` / ``state_dict``); the other,
the faithful seed order, is :class:`~shopsimrl.sampling.order.SeedOrder` (it keeps this class's evidence
and predictions, which size adaptive waves, and walks the seed's shuffled epochs instead of picking).

- ``"informative"`` estimates every prompt's pass rate under the current policy
  with a shared skill and a per-prompt difficulty (:mod:`~shopsimrl.sampling.estimate`),
  and from it ``q = 1 − ẑ``, the predicted probability that the next group of ``n``
  siblings has reward spread.  ``q`` is highest where the pass rate is near 50%,
  that is where a prompt's difficulty is near the policy's skill, so observed
  prompts wait in buckets by difficulty and each pick takes the oldest prompt of
  the bucket nearest the skill.  As the policy improves, the buckets it reaches
  are the prompts that used to fail.  Observed prompts with ``q < SKIP_Q`` count
  as *skipped*.  A pick takes a never-seen prompt instead when the never-seen
  prompts left exceed the pro-rata share of an exploration horizon
  (``EXPLORE_HORIZON_EPOCHS`` epochs' worth of picks), so every prompt is tried,
  or when the best observed prompt's ``q`` is below ``EXPLORE_Q`` (the known
  prompts have run dry); and a share
  ``RECHECK_SHARE`` of the picks re-checks the prompt observed the longest ago
  (GRESO, arXiv 2506.02177, saw ~20% of skipped prompts become useful again).
  Released prompts (aborted, surplus, technical) go back to the front of their
  line: never lost.

  With cluster labels (``clusters=``: a ShopSim task's category, a slime prompt's
  metadata key, the simulated world's cluster) the estimate adds a term per cluster,
  observed prompts wait in buckets per cluster (each measured from the skill its
  cluster meets; of the clusters' nearest prompts, those within ``CLUSTER_TIE_LOGITS``
  of the nearest count as equal and the cluster observed the longest ago wins), and
  an exploring pick takes its never-seen prompt by cluster
  (:mod:`~shopsimrl.sampling.clusters`): a never-tried cluster first, so every
  cluster is tried within ``K / N`` of the exploration horizon.  Without labels
  every pick is as before.

Every constant and its reason is in ``docs/efficient-sampling.md``.  Pure: no
I/O, no clock; every random draw comes from one seeded ``random.Random`` whose
state is part of ``state_dict``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from shopsimrl.errors import Refusal
from shopsimrl.sampling.clusters import ClusterBook, cluster_indices
from shopsimrl.sampling.estimate import PRIOR_SD, SkillModel, fit_population, sigmoid, zero_spread_probability
from shopsimrl.sampling.knobs import DEFAULT_N_SAMPLES_PER_PROMPT
from shopsimrl.sampling.modes import DEFAULT_STRATEGY, STRATEGIES, Strategy
from shopsimrl.sampling.verdict import Verdict, reward_spread_verdict

__all__ = ["DEFAULT_STRATEGY", "STRATEGIES", "NotEnoughPromptsError", "PromptSelector", "PromptStateError"]

#: Width (logits of difficulty) of the buckets observed prompts wait in (informative).
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
#: Decay of the population estimate used for prompts never seen (per first observation).
POPULATION_DECAY = 0.98
#: Pseudo-observations behind the population estimate's 50% start.
POPULATION_PRIOR_WEIGHT = 2.0
#: Decay (per first observation) of the first tries behind a never-seen prompt's logit (``predicted_logit``).
POPULATION_FIT_DECAY = 0.995
#: Decayed first tries needed before they stand in for a never-seen prompt's logit (fewer: the wide prior).
POPULATION_FIT_MIN_GROUPS = 16.0
#: The outward bucket scan gives way to a scan of every bucket after this many steps (sparse buckets).
_SCAN_LIMIT = 64

STATE_VERSION = 4


class NotEnoughPromptsError(Refusal, ValueError):
    """More prompts were asked for than are out of flight."""


class PromptStateError(ValueError):
    """``record`` / ``release`` for a prompt that is not in flight (or unknown)."""


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


class PromptSelector:
    """Hands out prompts to start and learns from their finished groups (see the module docstring)."""

    strategy: Strategy = Strategy.INFORMATIVE

    def __init__(
        self,
        prompt_ids: Iterable[Hashable],
        n_samples_per_prompt: int = DEFAULT_N_SAMPLES_PER_PROMPT,
        strategy: Strategy | str | None = None,
        seed: int = 0,
        *,
        prior_sd: float | None = None,
        explore_horizon_epochs: float | None = None,
        recheck_share: float | None = None,
        explore_q: float | None = None,
        clusters: Mapping[Hashable, Hashable] | Sequence[Hashable] | None = None,
    ) -> None:
        prior_sd = PRIOR_SD if prior_sd is None else prior_sd
        horizon = EXPLORE_HORIZON_EPOCHS if explore_horizon_epochs is None else explore_horizon_epochs
        recheck = RECHECK_SHARE if recheck_share is None else recheck_share
        explore_q = EXPLORE_Q if explore_q is None else explore_q
        if not 0.0 <= explore_q <= 1.0:
            raise ValueError(f"explore_q must be within [0, 1], got {explore_q!r}")
        if not horizon > 0.0:
            raise ValueError(f"explore_horizon_epochs must be > 0, got {horizon!r}")
        if not 0.0 <= recheck <= 1.0:
            raise ValueError(f"recheck_share must be within [0, 1], got {recheck!r}")
        if strategy is not None and Strategy.parse(strategy) is not self.strategy:
            raise ValueError(f"{type(self).__name__} is the {self.strategy} strategy, not {strategy}: "
                             "build a prompt source with shopsimrl.sampling.source.prompt_source(strategy, ...)")
        if isinstance(n_samples_per_prompt, bool) or not isinstance(n_samples_per_prompt, int) or n_samples_per_prompt < 1:
            raise ValueError(f"n_samples_per_prompt must be an integer >= 1, got {n_samples_per_prompt!r}")
        ids = list(dict.fromkeys(prompt_ids))
        if not ids:
            raise ValueError("the prompt set is empty")
        self.n = n_samples_per_prompt
        self.seed = seed
        self.prior_sd = float(prior_sd)
        self.explore_horizon_epochs = float(horizon)
        self.recheck_share = float(recheck)
        self.explore_q = float(explore_q)
        self._ids = ids
        self._horizon = max(1, round(horizon * len(ids)))  # picks within which every prompt is tried
        self._picks = 0  # informative picks so far
        self._pos = {pid: i for i, pid in enumerate(ids)}
        count = len(ids)
        self.cluster_labels: list[Hashable] | None = None  # cluster index -> label
        cluster_of: list[int] | None = None
        if clusters is not None:
            self.cluster_labels, cluster_of = cluster_indices(ids, clusters)
        self._cluster_of = cluster_of
        self._model = SkillModel(count, self.prior_sd, cluster_of)
        self._skip_distance = skip_distance(self.n)
        self._observed = [0] * count  # groups recorded (or released with rewards)
        self._chosen = bytearray(count)  # ever handed out
        self._chosen_count = 0
        self._in_flight: set[int] = set()
        self.epoch = 0
        self._rng = random.Random(f"shopsimrl-selector/{seed}")
        self._pop_zero = 0.0  # decayed count of first observations that had zero spread
        self._pop_seen = 0.0  # decayed count of first observations
        self._first_tries: dict[tuple[int, int], float] = {}  # (n, successes) of first observations, decayed
        self._first_tries_fit: tuple[float, float] | None = None  # fit_population of them (None: to be redone)
        self._stats = _zero_stats()
        # informative: never-seen prompts (shuffled); observed ones in buckets by difficulty, each an ordered set
        # (with labels the never-seen prompts wait in the cluster book instead, one line per cluster)
        self._unseen: deque[int] = deque()
        self._buckets: list[dict[int, dict[int, None]]] = [{} for _ in (self.cluster_labels or [None])]  # per cluster
        self._bucket_of: dict[int, int] = {}  # observed prompts out of flight -> their bucket (in their cluster)
        self._age: deque[tuple[int, int]] = deque()  # (prompt, observations) oldest first; stale entries skipped
        order = list(range(count))
        random.Random(f"shopsimrl-tasks/{seed}/0").shuffle(order)  # the seed's first epoch
        # with labels, never-seen prompts wait in the cluster book (one line per cluster); the book also
        # counts coverage per cluster for the seed order
        self._book = ClusterBook(cluster_of, order, seed) if cluster_of is not None else None
        self._start(order)

    def _start(self, order: list[int]) -> None:
        """The first line of prompts: the never-seen ones in the seed's first-epoch order (with labels: the book's)."""
        if self._book is None:
            self._unseen.extend(order)
        self.epoch = 1

    # -- the contract ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    @property
    def in_flight(self) -> frozenset[Hashable]:
        return frozenset(self._ids[i] for i in self._in_flight)

    def _require_free(self, k: int) -> None:
        """Refuse a request for ``k`` prompts that cannot all be distinct and out of flight (every strategy)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        free = len(self._ids) - len(self._in_flight)
        if k > free:
            raise NotEnoughPromptsError(
                f"asked for {k} prompts but only {free} of {len(self._ids)} are not in flight: "
                "use a larger prompt set or submit fewer groups at once"
            )

    def next_prompts(self, k: int) -> list[Hashable]:
        """``k`` distinct prompts to start now; none of them is already in flight."""
        self._require_free(k)
        out = [self._pick() for _ in range(k)]
        return [self._ids[i] for i in out]

    def next_prompt(self) -> tuple[Hashable, float]:
        """One prompt to start now, and its predicted chance ``q`` of a group with spread (adaptive waves)."""
        (prompt_id,) = self.next_prompts(1)
        return prompt_id, 1.0 - self.predicted_zero_spread(prompt_id)

    def settle(self, prompt_id: Hashable, rewards: Sequence[float] | None, *, surplus: bool = False) -> None:
        """A decided group back to the selector at step end (the step settles its account with the source):
        unscored, it is released; scored but surplus, it is released with its evidence; otherwise (kept or
        dropped) it is recorded."""
        if rewards is None:
            self.release(prompt_id)
        elif surplus:
            self.release(prompt_id, rewards)
        else:
            self.record(prompt_id, rewards)

    def record(self, prompt_id: Hashable, rewards: Sequence[float]) -> None:
        """A finished group's scored rewards (one per unique rollout): evidence, and out of flight."""
        i = self._flying(prompt_id, "record")
        self._observe(i, rewards)
        self._in_flight.discard(i)
        self._back_in_line(i, front=False)

    def release(self, prompt_id: Hashable, rewards: Sequence[float] | None = None) -> None:
        """A started prompt with no trained result (aborted, surplus, technical): back to the pool.

        ``rewards`` (a surplus group was scored) are kept as evidence.  The prompt goes first in
        line (of its bucket); the seed order consumes it instead, as slime does.
        """
        i = self._flying(prompt_id, "release")
        if rewards is not None:
            self._observe(i, rewards)
        self._in_flight.discard(i)
        self._stats["released"] += 1
        self._back_in_line(i, front=True)

    def release_in_flight(self) -> list[Hashable]:
        """Release every prompt in flight (a resumed run cannot finish them)."""
        flying = sorted(self._in_flight)
        for i in flying:
            self.release(self._ids[i])
        return [self._ids[i] for i in flying]

    # -- predictions -----------------------------------------------------------------------------
    def predicted_zero_spread(self, prompt_id: Hashable) -> float:
        """The predicted probability that ``prompt_id``'s next group has zero reward spread."""
        i = self._index(prompt_id)
        return self._predict(i)

    def predicted_pass_rate(self, prompt_id: Hashable) -> float | None:
        """Predicted pass rate under the current policy, or ``None`` for a prompt never observed."""
        i = self._index(prompt_id)
        if not self._observed[i]:
            return None
        return self._model.pass_rate(i, True)

    def predicted_logit(self, prompt_id: Hashable) -> tuple[float, float]:
        """Mean and variance of the prompt's pass-rate logit now (staged siblings' rule reads it).

        A never-seen prompt is a draw from the population of recent first tries: the Gaussian of logits that
        explains them best (``fit_population``, an empirical-Bayes prior that follows training; one population
        for every cluster).  Before ``POPULATION_FIT_MIN_GROUPS`` of them: at the skill, wide (where a first group
        places a prompt)."""
        i = self._index(prompt_id)
        if self._observed[i]:
            return self._model.logit(i, True)
        if sum(self._first_tries.values()) < POPULATION_FIT_MIN_GROUPS:
            return self._model.logit(i, False)
        if self._first_tries_fit is None:
            self._first_tries_fit = fit_population(self._first_tries)
        return self._first_tries_fit

    @property
    def skill(self) -> float:
        """The policy's estimated skill (logits, from 0 at the start): the selector's view of training progress."""
        return self._model.skill_mean

    def coverage(self) -> float:
        """Share of the prompts ever handed out."""
        return self._chosen_count / len(self._ids)

    def ever_chosen(self) -> list[Hashable]:
        """Every prompt handed out at least once."""
        return [pid for pid, chosen in zip(self._ids, self._chosen) if chosen]

    def cluster_coverage(self) -> tuple[float, float] | None:
        """Coverage per cluster, its minimum and median over clusters (``None`` without labels)."""
        return self._book.coverage() if self._book is not None else None

    def clusters_tried(self) -> int | None:
        """Clusters with at least one prompt handed out (``None`` without labels)."""
        return self._book.tried() if self._book is not None else None

    def pop_stats(self) -> dict[str, float]:
        """Counters since the previous call, which reading resets (*pop*, as ``dict.pop``; once per step):
        chosen, explored (never seen before), re-checked (a skipped prompt tried again), released, the summed
        predicted zero-spread of the chosen prompts; and ``skipped``: observed prompts out of flight whose predicted ``q`` is below ``SKIP_Q``
        (judged from their bucket; informative; 0 for seed).  With labels, also the levels
        ``cluster_coverage_min`` / ``cluster_coverage_median`` (coverage per cluster) and ``clusters_tried``."""
        stats, self._stats = self._stats, _zero_stats()
        stats["skipped"] = float(self._count_skipped())
        if self._book is not None:
            stats["cluster_coverage_min"], stats["cluster_coverage_median"] = self._book.coverage()
            stats["clusters_tried"] = float(self._book.tried())
        return stats

    # -- checkpoint ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain data (JSON-compatible when the prompt ids are str or int)."""
        version, internal, gauss = self._rng.getstate()
        return {
            "version": STATE_VERSION,
            "strategy": self.strategy,
            "n_samples_per_prompt": self.n,
            "seed": self.seed,
            "prior_sd": self.prior_sd,
            "explore_horizon_epochs": self.explore_horizon_epochs,
            "recheck_share": self.recheck_share,
            "explore_q": self.explore_q,
            "picks": self._picks,
            "prompt_ids": list(self._ids),
            "model": self._model.state_dict(),
            "observed": list(self._observed),
            "chosen": list(self._chosen),
            "in_flight": sorted(self._in_flight),
            "unseen": list(self._unseen),
            "buckets": [[c, key, list(bucket)] for c, buckets in enumerate(self._buckets)
                        for key, bucket in buckets.items()],
            "clusters": None if self._cluster_of is None else [self.cluster_labels[c] for c in self._cluster_of],
            "cluster_book": None if self._book is None else self._book.state_dict(),
            "age": [list(entry) for entry in self._age if self._current(entry)],
            "epoch": self.epoch,
            "rng": [version, list(internal), gauss],
            "population": [self._pop_zero, self._pop_seen],
            "first_tries": [[n, k, count] for (n, k), count in sorted(self._first_tries.items())],
            "stats": dict(self._stats),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PromptSelector:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"selector state version {state.get('version')!r} is not {STATE_VERSION}: it was saved by another "
                "version of shopsimrl; start the selector afresh (its estimates are rebuilt within an epoch)"
            )
        sel = cls(
            state["prompt_ids"], state["n_samples_per_prompt"], state["strategy"], state["seed"],
            prior_sd=state["prior_sd"], explore_horizon_epochs=state["explore_horizon_epochs"],
            recheck_share=state["recheck_share"], explore_q=state["explore_q"], clusters=state.get("clusters"),
        )
        sel._picks = int(state["picks"])
        count = len(sel._ids)
        for name in ("observed", "chosen"):
            if len(state[name]) != count:
                raise ValueError(f"selector state: {name} has {len(state[name])} entries for {count} prompts")
        sel._model.load_state_dict(state["model"])
        sel._observed = [int(x) for x in state["observed"]]
        sel._chosen = bytearray(state["chosen"])
        sel._chosen_count = sum(sel._chosen)
        sel._in_flight = {int(i) for i in state["in_flight"]}
        sel._unseen = deque(int(i) for i in state["unseen"])
        for c, key, bucket in state["buckets"]:
            sel._buckets[int(c)][int(key)] = dict.fromkeys(int(i) for i in bucket)
        sel._bucket_of = {i: key for buckets in sel._buckets for key, bucket in buckets.items() for i in bucket}
        if sel._book is not None:
            sel._book.load_state_dict(state["cluster_book"])
        sel._age = deque((int(i), int(seen)) for i, seen in state["age"])
        sel.epoch = int(state["epoch"])
        version, internal, gauss = state["rng"]
        sel._rng.setstate((version, tuple(internal), gauss))
        sel._pop_zero, sel._pop_seen = (float(x) for x in state["population"])
        sel._first_tries = {(int(n), int(k)): float(count) for n, k, count in state.get("first_tries", ())}
        sel._stats = {**_zero_stats(), **state.get("stats", {})}
        return sel

    # -- internals -------------------------------------------------------------------------------
    def _take(self, i: int, out: list[int], zero: float | None = None) -> None:
        """``i`` goes in flight; ``zero``: its predicted zero spread, when the caller has it already."""
        self._in_flight.add(i)
        out.append(i)
        stats = self._stats
        stats["chosen"] += 1
        stats["predicted_zero_spread_sum"] += self._predict(i) if zero is None else zero
        if not self._chosen[i]:
            self._chosen[i] = 1
            self._chosen_count += 1
            if self._book is not None:
                self._book.chose(i)

    def _pick(self) -> int:
        """Informative: one prompt (the caller checked that one is free)."""
        best = self._nearest()
        best_zero = self._predict(best) if best is not None else 1.0
        best_q = 1.0 - best_zero
        if self._unseen_count() and (best_q < self.explore_q or self._behind_exploration_schedule()):
            i = self._book.explore() if self._book is not None else self._unseen.popleft()
            self._stats["explored"] += 1
        else:
            oldest = self._oldest() if best is None or self._rng.random() < self.recheck_share else None
            if oldest is not None:
                i = oldest
                self._stats["rechecked"] += self._predict(i) > 1.0 - SKIP_Q
            else:
                assert best is not None, "no free prompt: next_prompts checks the count first"
                i = best
            self._unbucket(i)
        self._picks += 1
        self._take(i, [], best_zero if i == best else None)
        return i

    def _nearest(self) -> int | None:
        """The first prompt of the non-empty bucket nearest the policy's skill (pass rate nearest 50%); with labels,
        the nearest of each cluster's (measured from the skill the cluster meets), the nearest of them."""
        if self._cluster_of is None:
            return self._nearest_in(0)
        model = self._model
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
        where = self._model.cluster_skill(c) / BUCKET_WIDTH
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
        return i in self._bucket_of and self._observed[i] == seen

    def _count_skipped(self) -> int:
        limit = self._skip_distance / BUCKET_WIDTH
        total = 0
        for c, buckets in enumerate(self._buckets):
            if buckets:
                where = self._model.cluster_skill(c) / BUCKET_WIDTH
                total += sum(len(bucket) for key, bucket in buckets.items() if abs(key + 0.5 - where) > limit)
        return total

    def _unseen_count(self) -> int:
        """Never-seen prompts still waiting (informative picks only: the seed order keeps no such line)."""
        return self._book.unseen_count() if self._book is not None else len(self._unseen)

    def _behind_exploration_schedule(self) -> bool:
        """More never-seen prompts left than the horizon's pro-rata share after this pick: explore now."""
        left_after = max(0, self._horizon - self._picks - 1)
        return self._unseen_count() * self._horizon > left_after * len(self._ids)

    def _back_in_line(self, i: int, *, front: bool) -> None:
        """A prompt out of flight waits again: observed, in its bucket; never observed, with the unseen (with
        labels, first in its cluster's line)."""
        if self._observed[i]:
            self._place(i, front=front)
        elif self._book is not None:
            self._book.put_back(i)
        else:
            self._unseen.appendleft(i)

    def _place(self, i: int, *, front: bool) -> None:
        """An observed prompt out of flight: into the bucket of its difficulty, and into the age line."""
        key = math.floor(self._model.mean[i] / BUCKET_WIDTH)
        buckets = self._buckets[self._cluster_of[i] if self._cluster_of is not None else 0]
        bucket = buckets.setdefault(key, {})
        if front:
            buckets[key] = {i: None, **bucket}
        else:
            bucket[i] = None
        self._bucket_of[i] = key
        entry = (i, self._observed[i])
        if front:
            self._age.appendleft(entry)
        else:
            self._age.append(entry)
        if len(self._age) > 4 * len(self._ids) + 64:  # drop stale entries now and then: memory stays O(prompts)
            self._age = deque(e for e in self._age if self._current(e))

    def _unbucket(self, i: int) -> None:
        key = self._bucket_of.pop(i)
        buckets = self._buckets[self._cluster_of[i] if self._cluster_of is not None else 0]
        bucket = buckets[key]
        del bucket[i]
        if not bucket:
            del buckets[key]

    def _population_q(self) -> float:
        return 1.0 - (self._pop_zero + 0.5 * POPULATION_PRIOR_WEIGHT) / (self._pop_seen + POPULATION_PRIOR_WEIGHT)

    def _predict(self, i: int) -> float:
        if self._observed[i]:
            return self._model.zero_spread(i, True, self.n)
        if self._book is not None:  # the cluster's estimate is the never-seen prompt's prior
            return 1.0 - self._book.q(self._book.cluster_of[i], self._population_q())
        return 1.0 - self._population_q()

    def _observe(self, i: int, rewards: Sequence[float]) -> None:
        values = [float(r) for r in rewards]
        if not values:
            raise ValueError(f"prompt {self._ids[i]!r}: a group needs at least one reward")
        if any(v != v for v in values):
            raise ValueError(f"prompt {self._ids[i]!r}: rewards must be numbers, got NaN in {values}")
        zero = reward_spread_verdict(values) is Verdict.ZERO_STD
        successes = sum(min(1.0, max(0.0, v)) for v in values)  # a reward is read as a success probability
        if zero and 0.0 < successes < len(values):  # siblings agreed on a partial reward: count the agreement
            successes = float(len(values)) if successes >= 0.5 * len(values) else 0.0
        self._model.observe(i, bool(self._observed[i]), successes, len(values))
        if not self._observed[i]:
            self._pop_zero = POPULATION_DECAY * self._pop_zero + zero
            self._pop_seen = POPULATION_DECAY * self._pop_seen + 1.0
            self._first_try(len(values), successes)
            if self._book is not None:
                self._book.first_observation(i, zero)
        self._observed[i] += 1

    def _first_try(self, n: int, successes: float) -> None:
        """A prompt's first group, for the population of first tries (successes rounded: a partial reward)."""
        tries = self._first_tries
        for key in tries:
            tries[key] *= POPULATION_FIT_DECAY
        key = (n, min(n, max(0, round(successes))))
        tries[key] = tries.get(key, 0.0) + 1.0
        self._first_tries_fit = None

    def _index(self, prompt_id: Hashable) -> int:
        try:
            return self._pos[prompt_id]
        except KeyError:
            raise PromptStateError(f"unknown prompt {prompt_id!r}") from None

    def _flying(self, prompt_id: Hashable, what: str) -> int:
        i = self._index(prompt_id)
        if i not in self._in_flight:
            raise PromptStateError(f"{what}({prompt_id!r}): the prompt is not in flight (never started, or already finished)")
        return i


def _zero_stats() -> dict[str, float]:
    return {
        "chosen": 0,
        "explored": 0,
        "skipped": 0,
        "rechecked": 0,
        "released": 0,
        "predicted_zero_spread_sum": 0.0,
    }


#: W&B-style key prefix of the selector's figures (under the project's rollout/shopsim/ namespace).
SELECTOR_PREFIX = "rollout/shopsim/selector/"


def selector_step_metrics(
    stats: dict[str, float], *, informative: int, generated_episodes: int, coverage: float
) -> dict[str, float]:
    """One step's selector figures from :meth:`PromptSelector.pop_stats` and the step's outcome.

    ``informative``: groups trained with reward spread; ``generated_episodes``: episodes
    submitted (aborted ones included, as they were paid for).  A mean over nothing is omitted.
    """
    metrics = {
        SELECTOR_PREFIX + "prompts_chosen": float(stats["chosen"]),
        SELECTOR_PREFIX + "prompts_explored": float(stats["explored"]),
        SELECTOR_PREFIX + "prompts_skipped": float(stats["skipped"]),
        SELECTOR_PREFIX + "prompts_rechecked": float(stats["rechecked"]),
        SELECTOR_PREFIX + "prompts_released": float(stats["released"]),
        SELECTOR_PREFIX + "coverage": float(coverage),
    }
    for key in ("cluster_coverage_min", "cluster_coverage_median", "clusters_tried"):  # with cluster labels only
        if key in stats:
            metrics[SELECTOR_PREFIX + key] = float(stats[key])
    if stats["chosen"]:
        metrics[SELECTOR_PREFIX + "predicted_zero_spread_mean"] = stats["predicted_zero_spread_sum"] / stats["chosen"]
    if generated_episodes:
        metrics[SELECTOR_PREFIX + "informative_per_1k_episodes"] = 1000.0 * informative / generated_episodes
    return metrics
