"""``Evidence``: what finished groups showed about the prompts, held by every selector.

Every selection rule (the seed order, the informative skip, the spread rule) picks over
the same evidence, and adaptive waves, staged siblings and the step metrics read it
whatever the rule:

- the skill/difficulty model (:class:`~shopsimrl.sampling.estimate.SkillModel`): each
  prompt's pass-rate logit under the current policy;
- the first tries: the share of first groups with zero spread (a never-seen prompt's
  prediction) and their population fit (a never-seen prompt's logit, for staged siblings);
- per prompt: groups observed, its run of consecutive zero-spread groups (the
  skip rule's skip reads it), whether it was ever handed out;
- the set in flight, the counters of the step (``pop_stats``), and with cluster labels the
  :class:`~shopsimrl.sampling.clusters.ClusterBook` (coverage and first tries per cluster;
  its lines of never-seen prompts are the spread rule's).

It hands out and takes back nothing by itself: a rule calls :meth:`take` for a prompt it
hands out, :meth:`observe` for a group's rewards and :meth:`land` when a prompt comes out of
flight.  Pure: no I/O, no clock, no random draws.  Every constant's reason is in
docs/selection.md.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from shopsimrl.defaults import DEFAULT_N_SAMPLES_PER_PROMPT
from shopsimrl.errors import InvariantBroken, Refusal
from shopsimrl.sampling.clusters import ClusterBook, cluster_indices
from shopsimrl.sampling.estimate import PRIOR_SD, SkillModel, fit_population
from shopsimrl.sampling.verdict import Verdict, reward_spread_verdict

__all__ = ["POPULATION_FIT_DECAY", "POPULATION_FIT_MIN_GROUPS", "Evidence", "NotEnoughPromptsError",
           "PromptStateError"]

#: Decay of the population estimate used for prompts never seen (per first observation).
POPULATION_DECAY = 0.98
#: Pseudo-observations behind the population estimate's 50% start.
POPULATION_PRIOR_WEIGHT = 2.0
#: Decay (per first observation) of the first tries behind a never-seen prompt's logit (``predicted_logit``).
POPULATION_FIT_DECAY = 0.995
#: Decayed first tries needed before they stand in for a never-seen prompt's logit (fewer: the wide prior).
POPULATION_FIT_MIN_GROUPS = 16.0


class NotEnoughPromptsError(Refusal, ValueError):
    """More prompts were asked for than are out of flight."""


class PromptStateError(InvariantBroken, ValueError):
    """``record`` / ``release`` for a prompt that is not in flight (or unknown)."""


def zero_stats() -> dict[str, float]:
    """The counters of one step (see :meth:`Evidence.pop_stats`)."""
    return {
        "chosen": 0,
        "explored": 0,
        "skipped": 0,
        "rechecked": 0,
        "released": 0,
        "predicted_zero_spread_sum": 0.0,
    }


class Evidence:
    """The prompts, what their groups showed, and which are in flight (see the module docstring)."""

    def __init__(
        self,
        prompt_ids: Iterable[Hashable],
        n_samples_per_prompt: int = DEFAULT_N_SAMPLES_PER_PROMPT,
        seed: int = 0,
        *,
        prior_sd: float | None = None,
        clusters: Mapping[Hashable, Hashable] | Sequence[Hashable] | None = None,
        first_order: Sequence[int] | None = None,
    ) -> None:
        """``first_order``: the never-seen prompts' order for the cluster book's lines (the seed's first epoch)."""
        if isinstance(n_samples_per_prompt, bool) or not isinstance(n_samples_per_prompt, int) or n_samples_per_prompt < 1:
            raise ValueError(f"n_samples_per_prompt must be an integer >= 1, got {n_samples_per_prompt!r}")
        ids = list(dict.fromkeys(prompt_ids))
        if not ids:
            raise ValueError("the prompt set is empty")
        self.n = n_samples_per_prompt
        self.seed = seed
        self.prior_sd = float(PRIOR_SD if prior_sd is None else prior_sd)
        self.ids = ids
        self.pos = {pid: i for i, pid in enumerate(ids)}
        count = len(ids)
        self.cluster_labels: list[Hashable] | None = None  # cluster index -> label
        self.cluster_of: list[int] | None = None
        if clusters is not None:
            self.cluster_labels, self.cluster_of = cluster_indices(ids, clusters)
        self.model = SkillModel(count, self.prior_sd, self.cluster_of)
        self.observed = [0] * count  # groups recorded (or released with rewards)
        self.solved_streak = [0] * count  # consecutive solved groups (every sibling at the top reward), up to the last
        self.chosen = bytearray(count)  # ever handed out
        self.chosen_count = 0
        self.in_flight: set[int] = set()
        self.pop_zero = 0.0  # decayed count of first observations that had zero spread
        self.pop_seen = 0.0  # decayed count of first observations
        self.first_tries: dict[tuple[int, int], float] = {}  # (n, successes) of first observations, decayed
        self._first_tries_fit: tuple[float, float] | None = None  # fit_population of them (None: to be redone)
        self.stats = zero_stats()
        order = list(range(count)) if first_order is None else list(first_order)
        self.book = ClusterBook(self.cluster_of, order, seed) if self.cluster_of is not None else None

    def __len__(self) -> int:
        return len(self.ids)

    # -- prompts ---------------------------------------------------------------------------------
    def index(self, prompt_id: Hashable) -> int:
        try:
            return self.pos[prompt_id]
        except KeyError:
            raise PromptStateError(f"unknown prompt {prompt_id!r}") from None

    def flying(self, prompt_id: Hashable, what: str) -> int:
        """The index of a prompt in flight (``what`` names the call that needs it in flight)."""
        i = self.index(prompt_id)
        if i not in self.in_flight:
            raise PromptStateError(f"{what}({prompt_id!r}): the prompt is not in flight (never started, or already finished)")
        return i

    def require_free(self, k: int) -> None:
        """Refuse a request for ``k`` prompts that cannot all be distinct and out of flight (every rule)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        free = len(self.ids) - len(self.in_flight)
        if k > free:
            raise NotEnoughPromptsError(
                f"asked for {k} prompts but only {free} of {len(self.ids)} are not in flight: "
                "use a larger prompt set or submit fewer groups at once"
            )

    def take(self, i: int, zero: float | None = None) -> None:
        """``i`` is handed out (in flight); ``zero``: its predicted zero spread, when the caller has it already."""
        self.in_flight.add(i)
        stats = self.stats
        stats["chosen"] += 1
        stats["predicted_zero_spread_sum"] += self.predict(i) if zero is None else zero
        if not self.chosen[i]:
            self.chosen[i] = 1
            self.chosen_count += 1
            if self.book is not None:
                self.book.chose(i)

    def land(self, i: int) -> None:
        """``i`` is out of flight (recorded or released)."""
        self.in_flight.discard(i)

    # -- evidence --------------------------------------------------------------------------------
    def observe(self, i: int, rewards: Sequence[float]) -> None:
        """A scored group's rewards (one per unique rollout)."""
        values = [float(r) for r in rewards]
        if not values:
            raise ValueError(f"prompt {self.ids[i]!r}: a group needs at least one reward")
        if any(v != v for v in values):
            raise ValueError(f"prompt {self.ids[i]!r}: rewards must be numbers, got NaN in {values}")
        zero = reward_spread_verdict(values) is Verdict.ZERO_STD
        successes = sum(min(1.0, max(0.0, v)) for v in values)  # a reward is read as a success probability
        if zero and 0.0 < successes < len(values):  # siblings agreed on a partial reward: count the agreement
            successes = float(len(values)) if successes >= 0.5 * len(values) else 0.0
        self.model.observe(i, bool(self.observed[i]), successes, len(values))
        if not self.observed[i]:
            self.pop_zero = POPULATION_DECAY * self.pop_zero + zero
            self.pop_seen = POPULATION_DECAY * self.pop_seen + 1.0
            self._first_try(len(values), successes)
            if self.book is not None:
                self.book.first_observation(i, zero)
        self.observed[i] += 1
        self.solved_streak[i] = self.solved_streak[i] + 1 if zero and min(values) >= 1.0 else 0

    def _first_try(self, n: int, successes: float) -> None:
        """A prompt's first group, for the population of first tries (successes rounded: a partial reward)."""
        tries = self.first_tries
        for key in tries:
            tries[key] *= POPULATION_FIT_DECAY
        key = (n, min(n, max(0, round(successes))))
        tries[key] = tries.get(key, 0.0) + 1.0
        self._first_tries_fit = None

    # -- predictions -----------------------------------------------------------------------------
    def population_q(self) -> float:
        return 1.0 - (self.pop_zero + 0.5 * POPULATION_PRIOR_WEIGHT) / (self.pop_seen + POPULATION_PRIOR_WEIGHT)

    def predict(self, i: int) -> float:
        """The predicted probability that prompt ``i``'s next group has zero reward spread."""
        if self.observed[i]:
            return self.model.zero_spread(i, True, self.n)
        if self.book is not None:  # the cluster's estimate is the never-seen prompt's prior
            return 1.0 - self.book.q(self.book.cluster_of[i], self.population_q())
        return 1.0 - self.population_q()

    def pass_rate(self, i: int) -> float | None:
        """Predicted pass rate under the current policy, or ``None`` for a prompt never observed."""
        return self.model.pass_rate(i, True) if self.observed[i] else None

    def logit(self, i: int) -> tuple[float, float]:
        """Mean and variance of the prompt's pass-rate logit now (staged siblings' rule reads it).

        A never-seen prompt is a draw from the population of recent first tries: the Gaussian of logits that
        explains them best (``fit_population``, an empirical-Bayes prior that follows training; one population
        for every cluster).  Before ``POPULATION_FIT_MIN_GROUPS`` of them: at the skill, wide (where a first group
        places a prompt)."""
        if self.observed[i]:
            return self.model.logit(i, True)
        if sum(self.first_tries.values()) < POPULATION_FIT_MIN_GROUPS:
            return self.model.logit(i, False)
        if self._first_tries_fit is None:
            self._first_tries_fit = fit_population(self.first_tries)
        return self._first_tries_fit

    # -- figures ---------------------------------------------------------------------------------
    def coverage(self) -> float:
        """Share of the prompts ever handed out."""
        return self.chosen_count / len(self.ids)

    def pop_stats(self) -> dict[str, float]:
        """The step's counters, which reading resets; with labels, also the levels ``cluster_coverage_min`` /
        ``cluster_coverage_median`` (coverage per cluster) and ``clusters_tried``."""
        stats, self.stats = self.stats, zero_stats()
        if self.book is not None:
            stats["cluster_coverage_min"], stats["cluster_coverage_median"] = self.book.coverage()
            stats["clusters_tried"] = float(self.book.tried())
        return stats

    # -- checkpoint ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain data (JSON-compatible when the prompt ids are str or int)."""
        return {
            "n_samples_per_prompt": self.n,
            "seed": self.seed,
            "prior_sd": self.prior_sd,
            "prompt_ids": list(self.ids),
            "clusters": None if self.cluster_of is None or self.cluster_labels is None
            else [self.cluster_labels[c] for c in self.cluster_of],
            "model": self.model.state_dict(),
            "observed": list(self.observed),
            "solved_streak": list(self.solved_streak),
            "chosen": list(self.chosen),
            "in_flight": sorted(self.in_flight),
            "cluster_book": None if self.book is None else self.book.state_dict(),
            "population": [self.pop_zero, self.pop_seen],
            "first_tries": [[n, k, count] for (n, k), count in sorted(self.first_tries.items())],
            "stats": dict(self.stats),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Evidence:
        ev = cls(state["prompt_ids"], state["n_samples_per_prompt"], state["seed"], prior_sd=state["prior_sd"],
                 clusters=state.get("clusters"))
        count = len(ev.ids)
        for name in ("observed", "solved_streak", "chosen"):
            if len(state[name]) != count:
                raise ValueError(f"selector state: {name} has {len(state[name])} entries for {count} prompts")
        ev.model.load_state_dict(state["model"])
        ev.observed = [int(x) for x in state["observed"]]
        ev.solved_streak = [int(x) for x in state["solved_streak"]]
        ev.chosen = bytearray(state["chosen"])
        ev.chosen_count = sum(ev.chosen)
        ev.in_flight = {int(i) for i in state["in_flight"]}
        if ev.book is not None:
            ev.book.load_state_dict(state["cluster_book"])
        ev.pop_zero, ev.pop_seen = (float(x) for x in state["population"])
        ev.first_tries = {(int(n), int(k)): float(count) for n, k, count in state["first_tries"]}
        ev.stats = {**zero_stats(), **state["stats"]}
        return ev
