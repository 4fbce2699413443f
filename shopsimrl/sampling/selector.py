"""``PromptSelector``: which prompts to start next, learned from the groups that finished.

Two strategies, one contract (``next_prompts`` / ``record`` / ``release`` /
``state_dict``):

- ``"seed"`` (the default everywhere) is the faithful data order: the prompt set
  shuffled once per epoch with the seed, walked in order, nothing skipped.  A
  prompt met while it is still in flight is deferred and served first next time.
  A released prompt is consumed, as in slime without ``--partial-rollout``.
- ``"informative"`` keeps, per prompt, a pass-rate estimate that forgets old
  evidence (a decayed Beta posterior, as in MoPPS, arXiv 2507.04632) and from it
  ``q = 1 − ẑ``, the predicted probability that the next group of ``n`` siblings
  has reward spread (``ẑ`` is ``z(p) = pⁿ + (1−p)ⁿ`` averaged over the posterior).
  Observed prompts with ``q >= SKIP_Q`` wait in ``LEVELS`` buckets by ``q``,
  oldest first within a bucket; the others are *skipped*: they wait in one line,
  oldest observation first.  Each pick takes the oldest prompt of the best
  bucket, except that it takes a never-seen prompt when the never-seen prompts
  left exceed the pro-rata share of an exploration horizon
  (``EXPLORE_HORIZON_EPOCHS`` epochs' worth of picks), or when nothing seen
  beats the population's prediction, so every prompt is tried, and a share ``RECHECK_SHARE`` re-checks the
  prompt skipped the longest (GRESO, arXiv 2506.02177, saw ~20% of skipped
  prompts become useful again).  Released prompts (aborted, surplus, technical)
  go back to the front of their line: never lost.

Every constant and its reason is in ``docs/efficient-sampling.md``.  Pure: no
I/O, no clock; every random draw comes from one seeded ``random.Random`` whose
state is part of ``state_dict``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from shopsimrl.sampling.knobs import DEFAULT_N_SAMPLES_PER_PROMPT, ZERO_STD_EPSILON

STRATEGIES = ("seed", "informative")
DEFAULT_STRATEGY = "seed"

#: Beta(0.3, 0.3) prior: its predicted zero-spread share for 8 siblings (0.55) is the release run's first round (54%).
PRIOR = 0.3
#: Evidence kept when a prompt is observed again (MoPPS-style decay): the policy has moved since.
DECAY = 0.8
#: Buckets of the predicted spread probability q (informative): picks take the best bucket.
LEVELS = 20
#: A prompt with q below this is "skipped": it waits for a re-check.
SKIP_Q = 0.5
#: Exploration horizon, in epochs' worth of picks (one epoch = as many picks as there are prompts): every prompt
#: is tried within this many picks (plus the re-tries of never-seen prompts that were aborted).  Exploration is
#: paced: a pick explores whenever the never-seen prompts left exceed the pro-rata share of the horizon left, so
#: it stops once everything is covered and late picks are never spent on it.
EXPLORE_HORIZON_EPOCHS = 2.0
#: Share of picks that re-check a skipped prompt.
RECHECK_SHARE = 0.05
#: Decay of the population estimate used for prompts never seen (per first observation).
POPULATION_DECAY = 0.98
#: Pseudo-observations behind the population estimate's 50% start.
POPULATION_PRIOR_WEIGHT = 2.0

STATE_VERSION = 2


class NotEnoughPromptsError(ValueError):
    """More prompts were asked for than are out of flight."""


class PromptStateError(ValueError):
    """``record`` / ``release`` for a prompt that is not in flight (or unknown)."""


def zero_spread_probability(p: float, n: int) -> float:
    """``z(p) = pⁿ + (1−p)ⁿ``: the chance that ``n`` siblings with pass rate ``p`` all agree."""
    return p**n + (1.0 - p) ** n


def beta_zero_spread(alpha: float, beta: float, n: int) -> float:
    """``E[pⁿ + (1−p)ⁿ]`` for ``p ~ Beta(alpha, beta)``: exact, O(n)."""
    up = down = 1.0
    total = alpha + beta
    for j in range(n):
        d = total + j
        up *= (alpha + j) / d
        down *= (beta + j) / d
    return up + down


class PromptSelector:
    """Hands out prompts to start and learns from their finished groups (see the module docstring)."""

    def __init__(
        self,
        prompt_ids: Iterable[Hashable],
        n_samples_per_prompt: int = DEFAULT_N_SAMPLES_PER_PROMPT,
        strategy: str = DEFAULT_STRATEGY,
        seed: int = 0,
        *,
        decay: float | None = None,
        prior: float | None = None,
        explore_horizon_epochs: float | None = None,
    ) -> None:
        decay = DECAY if decay is None else decay
        prior = PRIOR if prior is None else prior
        horizon = EXPLORE_HORIZON_EPOCHS if explore_horizon_epochs is None else explore_horizon_epochs
        if not horizon > 0.0:
            raise ValueError(f"explore_horizon_epochs must be > 0, got {horizon!r}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if isinstance(n_samples_per_prompt, bool) or not isinstance(n_samples_per_prompt, int) or n_samples_per_prompt < 1:
            raise ValueError(f"n_samples_per_prompt must be an integer >= 1, got {n_samples_per_prompt!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be within [0, 1) (evidence must fade), got {decay!r}")
        if not prior > 0.0:
            raise ValueError(f"prior must be > 0 (Beta pseudo-counts), got {prior!r}")
        ids = list(dict.fromkeys(prompt_ids))
        if not ids:
            raise ValueError("the prompt set is empty")
        self.strategy = strategy
        self.n = n_samples_per_prompt
        self.seed = seed
        self.decay = decay
        self.prior = prior
        self.explore_horizon_epochs = float(horizon)
        self._ids = ids
        self._horizon = max(1, round(horizon * len(ids)))  # picks within which every prompt is tried
        self._picks = 0  # informative picks so far
        self._pos = {pid: i for i, pid in enumerate(ids)}
        count = len(ids)
        self._succ = [0.0] * count  # decayed success evidence (sum of rewards in [0, 1])
        self._fail = [0.0] * count  # decayed failure evidence
        self._zhat = [0.0] * count  # predicted zero-spread, valid once observed
        self._observed = [0] * count  # groups recorded (or released with rewards)
        self._last_zero = bytearray(count)  # the last observed group had zero spread
        self._chosen = bytearray(count)  # ever handed out
        self._chosen_count = 0
        self._in_flight: set[int] = set()
        self._order: deque[int] = deque()  # the rest of the current epoch pass
        self._deferred: dict[int, None] = {}  # met while in flight: first in line next time (ordered set)
        self.epoch = 0
        self._rng = random.Random(f"shopsimrl-selector/{seed}")
        self._pop_zero = 0.0  # decayed count of first observations that had zero spread
        self._pop_seen = 0.0  # decayed count of first observations
        self._stats = _zero_stats()
        # informative: never-seen prompts (shuffled) and observed ones in buckets by predicted spread
        self._unseen: deque[int] = deque()
        self._levels: list[deque[int]] = [deque() for _ in range(LEVELS)]  # q >= SKIP_Q, by bucket
        self._skipped: deque[int] = deque()  # q < SKIP_Q, oldest observation first: the re-check line
        if strategy == "informative":
            order = list(range(count))
            random.Random(f"shopsimrl-tasks/{seed}/0").shuffle(order)
            self._unseen.extend(order)
            self.epoch = 1

    # -- the contract ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    @property
    def in_flight(self) -> frozenset[Hashable]:
        return frozenset(self._ids[i] for i in self._in_flight)

    def next_prompts(self, k: int) -> list[Hashable]:
        """``k`` distinct prompts to start now; none of them is already in flight."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        free = len(self._ids) - len(self._in_flight)
        if k > free:
            raise NotEnoughPromptsError(
                f"asked for {k} prompts but only {free} of {len(self._ids)} are not in flight: "
                "use a larger prompt set or submit fewer groups at once"
            )
        if self.strategy == "informative":
            out = [self._pick() for _ in range(k)]
            return [self._ids[i] for i in out]
        out: list[int] = []
        in_flight = self._in_flight
        for i in list(self._deferred):
            if len(out) == k:
                break
            if i not in in_flight:
                del self._deferred[i]
                self._take(i, out)
        while len(out) < k:
            if not self._order:
                self._new_epoch()
            i = self._order.popleft()
            if i in in_flight:
                self._deferred[i] = None
                continue
            self._take(i, out)
        return [self._ids[i] for i in out]

    def record(self, prompt_id: Hashable, rewards: Sequence[float]) -> None:
        """A finished group's scored rewards (one per unique rollout): evidence, and out of flight."""
        i = self._flying(prompt_id, "record")
        self._observe(i, rewards)
        self._in_flight.discard(i)
        if self.strategy == "informative":
            self._place(i, front=False)

    def release(self, prompt_id: Hashable, rewards: Sequence[float] | None = None) -> None:
        """A started prompt with no trained result (aborted, surplus, technical): back to the pool.

        ``rewards`` (a surplus group was scored) are kept as evidence.  ``informative``
        puts the prompt first in line (of its bucket); ``seed`` consumes it, as slime does.
        """
        i = self._flying(prompt_id, "release")
        if rewards is not None:
            self._observe(i, rewards)
        self._in_flight.discard(i)
        self._stats["released"] += 1
        if self.strategy == "informative":  # first in line again
            if self._observed[i]:
                self._place(i, front=True)
            else:
                self._unseen.appendleft(i)

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
        """Posterior mean pass rate, or ``None`` for a prompt never observed."""
        i = self._index(prompt_id)
        if not self._observed[i]:
            return None
        a, b = self.prior + self._succ[i], self.prior + self._fail[i]
        return a / (a + b)

    def coverage(self) -> float:
        """Share of the prompts ever handed out."""
        return self._chosen_count / len(self._ids)

    def pop_stats(self) -> dict[str, float]:
        """Counters since the previous call (then reset): chosen, explored (never seen before), re-checked
        (a skipped prompt tried again), released, the summed predicted zero-spread of the chosen prompts;
        and ``skipped``: observed prompts now waiting below ``SKIP_Q`` (informative; 0 for seed)."""
        stats, self._stats = self._stats, _zero_stats()
        stats["skipped"] = float(len(self._skipped))
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
            "decay": self.decay,
            "prior": self.prior,
            "explore_horizon_epochs": self.explore_horizon_epochs,
            "picks": self._picks,
            "prompt_ids": list(self._ids),
            "succ": list(self._succ),
            "fail": list(self._fail),
            "zhat": list(self._zhat),
            "observed": list(self._observed),
            "last_zero": list(self._last_zero),
            "chosen": list(self._chosen),
            "in_flight": sorted(self._in_flight),
            "order": list(self._order),
            "deferred": list(self._deferred),
            "unseen": list(self._unseen),
            "levels": [list(level) for level in self._levels],
            "skipped": list(self._skipped),
            "epoch": self.epoch,
            "rng": [version, list(internal), gauss],
            "population": [self._pop_zero, self._pop_seen],
            "stats": dict(self._stats),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PromptSelector:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"selector state version {state.get('version')!r} is not {STATE_VERSION}")
        sel = cls(
            state["prompt_ids"], state["n_samples_per_prompt"], state["strategy"], state["seed"],
            decay=state["decay"], prior=state["prior"], explore_horizon_epochs=state["explore_horizon_epochs"],
        )
        sel._picks = int(state["picks"])
        count = len(sel._ids)
        for name in ("succ", "fail", "zhat", "observed", "last_zero", "chosen"):
            if len(state[name]) != count:
                raise ValueError(f"selector state: {name} has {len(state[name])} entries for {count} prompts")
        sel._succ = [float(x) for x in state["succ"]]
        sel._fail = [float(x) for x in state["fail"]]
        sel._zhat = [float(x) for x in state["zhat"]]
        sel._observed = [int(x) for x in state["observed"]]
        sel._last_zero = bytearray(state["last_zero"])
        sel._chosen = bytearray(state["chosen"])
        sel._chosen_count = sum(sel._chosen)
        sel._in_flight = {int(i) for i in state["in_flight"]}
        sel._order = deque(int(i) for i in state["order"])
        sel._deferred = dict.fromkeys(int(i) for i in state["deferred"])
        sel._unseen = deque(int(i) for i in state["unseen"])
        if len(state["levels"]) != LEVELS:
            raise ValueError(f"selector state: {len(state['levels'])} buckets, this version has {LEVELS}")
        sel._levels = [deque(int(i) for i in level) for level in state["levels"]]
        sel._skipped = deque(int(i) for i in state["skipped"])
        sel.epoch = int(state["epoch"])
        version, internal, gauss = state["rng"]
        sel._rng.setstate((version, tuple(internal), gauss))
        sel._pop_zero, sel._pop_seen = (float(x) for x in state["population"])
        sel._stats = {**_zero_stats(), **state.get("stats", {})}
        return sel

    # -- internals -------------------------------------------------------------------------------
    def _take(self, i: int, out: list[int]) -> None:
        self._in_flight.add(i)
        out.append(i)
        stats = self._stats
        stats["chosen"] += 1
        stats["predicted_zero_spread_sum"] += self._predict(i)
        if not self._chosen[i]:
            if self.strategy == "seed":
                stats["explored"] += 1
            self._chosen[i] = 1
            self._chosen_count += 1

    def _pick(self) -> int:
        """Informative: one prompt (the caller checked that one is free)."""
        levels = self._levels
        top = next((lv for lv in range(LEVELS - 1, -1, -1) if levels[lv]), None)
        best_q = (top + 1) / LEVELS if top is not None else 0.0
        if self._unseen and (best_q <= self._population_q() or self._behind_exploration_schedule()):
            i = self._unseen.popleft()
            self._stats["explored"] += 1
        elif self._skipped and (top is None or self._rng.random() < RECHECK_SHARE):
            i = self._skipped.popleft()  # the prompt skipped the longest
            self._stats["rechecked"] += 1
        else:
            assert top is not None, "no free prompt: next_prompts checks the count first"
            i = levels[top].popleft()
        self._picks += 1
        out: list[int] = []
        self._take(i, out)
        return i

    def _behind_exploration_schedule(self) -> bool:
        """More never-seen prompts left than the horizon's pro-rata share after this pick: explore now."""
        left_after = max(0, self._horizon - self._picks - 1)
        return len(self._unseen) * self._horizon > left_after * len(self._ids)

    def _place(self, i: int, *, front: bool) -> None:
        """An observed prompt out of flight: into its bucket, or the re-check line when q < SKIP_Q."""
        q = 1.0 - self._zhat[i]
        line = self._skipped if q < SKIP_Q else self._levels[min(LEVELS - 1, int(q * LEVELS))]
        if front:
            line.appendleft(i)
        else:
            line.append(i)

    def _population_q(self) -> float:
        return 1.0 - (self._pop_zero + 0.5 * POPULATION_PRIOR_WEIGHT) / (self._pop_seen + POPULATION_PRIOR_WEIGHT)

    def _new_epoch(self) -> None:
        order = list(range(len(self._ids)))
        random.Random(f"shopsimrl-tasks/{self.seed}/{self.epoch}").shuffle(order)
        self.epoch += 1
        self._order.extend(order)

    def _predict(self, i: int) -> float:
        if self._observed[i]:
            return self._zhat[i]
        return 1.0 - self._population_q()

    def _observe(self, i: int, rewards: Sequence[float]) -> None:
        values = [float(r) for r in rewards]
        if not values:
            raise ValueError(f"prompt {self._ids[i]!r}: a group needs at least one reward")
        if any(v != v for v in values):
            raise ValueError(f"prompt {self._ids[i]!r}: rewards must be numbers, got NaN in {values}")
        zero = max(values) - min(values) <= ZERO_STD_EPSILON
        successes = sum(min(1.0, max(0.0, v)) for v in values)  # a reward is read as a success probability
        d = self.decay
        self._succ[i] = d * self._succ[i] + successes
        self._fail[i] = d * self._fail[i] + (len(values) - successes)
        if not self._observed[i]:
            self._pop_zero = POPULATION_DECAY * self._pop_zero + zero
            self._pop_seen = POPULATION_DECAY * self._pop_seen + 1.0
        self._observed[i] += 1
        self._last_zero[i] = zero
        self._zhat[i] = beta_zero_spread(self.prior + self._succ[i], self.prior + self._fail[i], self.n)

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
    if stats["chosen"]:
        metrics[SELECTOR_PREFIX + "predicted_zero_spread_mean"] = stats["predicted_zero_spread_sum"] / stats["chosen"]
    if generated_episodes:
        metrics[SELECTOR_PREFIX + "informative_per_1k_episodes"] = 1000.0 * informative / generated_episodes
    return metrics
