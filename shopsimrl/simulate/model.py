"""The simulated world: prompts with a latent difficulty, and a policy that learns from informative groups.

Pass rate of prompt ``i`` under the current policy::

    p_i = sigmoid(skill + bonus_i − difficulty_i)

- ``difficulty_i ~ Normal(difficulty_mean, difficulty_sd)``, drawn once per run;
- ``skill`` (global) grows by ``eta_global × (1 − skill/skill_cap)`` for every
  informative group trained on (it approaches ``skill_cap``: early updates teach the
  most): under GRPO a zero-spread group has zero advantage, hence no gradient, and
  with the std normalization every informative group moves the policy by a similar
  amount;
- ``bonus_i`` grows by ``eta_prompt`` each time prompt ``i`` itself is trained on with
  spread (what the policy learns about that very prompt).

**Clusters** (``clusters = K >= 1``, ``transfer = S``; ``K = 0``, the default, is the
calibrated world above).  Prompt ``i`` belongs to cluster ``i mod K`` (the
difficulties are independent draws, so every cluster has the same spread of them),
and each cluster has its own skill ``skill_c`` in place of the shared one::

    p_i = sigmoid(skill_c(i) + bonus_i − difficulty_i)

An informative group of cluster ``c`` teaches every cluster ``c'`` the share ``S``
of the calibrated step, ``S × eta_global × (1 − skill_c'/skill_cap)``, and its own
cluster the rest, concentrated on the ``1/K`` of the prompts it holds:
``(1 − S) × K × eta_global × (1 − skill_c/skill_cap)``.  Summed over the prompts,
a group teaches as much as in the calibrated world; ``S = 1`` *is* the calibrated
world, and with ``S = 0`` a cluster learns only from its own groups.

**Directions** (``directions = K >= 2``; ``K = 0``, the default, has none): the prompts
disagree about what to learn (:mod:`~shopsimrl.simulate.directions`).  Prompt ``i`` has a
kind ``k_i`` and its pass rate a stance term::

    p_i = sigmoid(skill + bonus_i − difficulty_i + w · (u_k(i) · θ))

where every informative group trained on pulls the shared stance ``θ`` toward its prompt's
direction ``u_k``; kind ``k``'s difficulties are centred ``kind_difficulty_step · k/(K − 1)``
above ``difficulty_mean``.  With ``novelty < 1`` a prompt's informative group teaches the
shared skill ``novelty^t`` of ``eta_global``, ``t`` its earlier trainings: a prompt trained
over and over has less left to teach every prompt (the learner's focus prompts doubled their
own success while the rest gained little).  ``calibrate_learner.LEARNER_2000`` is this world fitted to the
main job's GRPO learner.

A group is ``n`` Bernoulli(``p_i``) rewards; with probability ``technical_rate`` it is
unscorable instead.  An episode lasts a log-normal time; a group finishes when its
slowest sibling does (siblings run concurrently, and so do all groups in flight).

The defaults are the calibration to the public 80-step release run (see
``calibrate.py`` and docs/simulate.md for the fit).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from shopsimrl.sampling.estimate import sigmoid
from shopsimrl.simulate.directions import DirectionGeometry, Stance, draw_kinds

#: The fields of a world with directions: left out of a world without them (its record stays as it was).
DIRECTION_FIELDS = ("directions", "direction_angle_deg", "direction_weight", "direction_rate", "majority_share",
                    "kind_difficulty_step", "novelty")


@dataclass(frozen=True)
class WorldParams:
    prompts: int = 1000
    difficulty_mean: float = -0.5
    difficulty_sd: float = 5.0
    eta_global: float = 0.016
    eta_prompt: float = 0.0
    skill_cap: float = 8.0
    technical_rate: float = 4 / 2560  # the release run: 4 technical groups in 2,560 submitted
    episode_median_s: float = 55.15
    episode_sigma: float = 0.5
    clusters: int = 0  # 0: no clusters (the calibrated world); K >= 1: the prompts fall into K clusters
    transfer: float = 1.0  # share of a cluster's learning that carries to every prompt (with clusters)
    directions: int = 0  # 0: every prompt learns alike; K >= 2: K kinds of prompt pull a shared stance apart
    direction_angle_deg: float = 60.0  # with directions: kind 0 at +angle, kind K-1 at -angle
    direction_weight: float = 2.0  # with directions: logits gained when the stance is the prompt's own direction
    direction_rate: float = 0.05  # with directions: the stance's step toward a trained prompt's direction
    majority_share: float = 0.6  # with directions: the share of prompts of kind 0
    kind_difficulty_step: float = 0.0  # with directions: kind K-1's difficulties are centred this much higher
    novelty: float = 1.0  # each earlier training of a prompt scales the skill its next group teaches by this (1: none)

    def __post_init__(self) -> None:
        if self.prompts < 1:
            raise ValueError(f"prompts must be >= 1, got {self.prompts}")
        if self.difficulty_sd < 0 or self.eta_global < 0 or self.eta_prompt < 0:
            raise ValueError("difficulty_sd, eta_global and eta_prompt must be >= 0")
        if self.skill_cap <= 0:
            raise ValueError(f"skill_cap must be > 0, got {self.skill_cap}")
        if not 0.0 <= self.technical_rate < 1.0:
            raise ValueError(f"technical_rate must be within [0, 1), got {self.technical_rate}")
        if self.episode_median_s <= 0 or self.episode_sigma < 0:
            raise ValueError("episode_median_s must be > 0 and episode_sigma >= 0")
        if not 0 <= self.clusters <= self.prompts:
            raise ValueError(f"clusters must be within [0, prompts={self.prompts}], got {self.clusters}")
        if not 0.0 <= self.transfer <= 1.0:
            raise ValueError(f"transfer must be within [0, 1], got {self.transfer}")
        if not 0.0 < self.novelty <= 1.0:
            raise ValueError(f"novelty must be within (0, 1], got {self.novelty}")
        if self.novelty < 1.0 and not self.directions:
            raise ValueError("novelty is a parameter of worlds with directions")
        if self.directions:
            if self.clusters:
                raise ValueError("directions and clusters are separate worlds: choose one")
            if self.directions > self.prompts:
                raise ValueError(f"directions must be within [2, prompts={self.prompts}], got {self.directions}")
            self.geometry()  # checks the direction constants (directions >= 2)
            if not 0.0 < self.majority_share < 1.0:
                raise ValueError(f"majority_share must be within (0, 1), got {self.majority_share}")

    def geometry(self) -> DirectionGeometry:
        return DirectionGeometry(self.directions, self.direction_angle_deg, self.direction_weight, self.direction_rate)

    def as_dict(self) -> dict[str, float]:
        out = asdict(self)
        if not self.directions:
            for name in DIRECTION_FIELDS:
                del out[name]
        return out

    @property
    def label(self) -> str:
        """A short name: ``calibrated``-style parameters print as they are; clustered worlds say K and S."""
        if self.directions:
            return f"{self.directions} directions at ±{self.direction_angle_deg:g}°"
        return f"K = {self.clusters}, S = {self.transfer:g}" if self.clusters else "no clusters"


class World:
    """One run's prompts and policy; every draw comes from ``rng`` (seeded by the caller)."""

    def __init__(self, params: WorldParams, seed: int) -> None:
        self.params = params
        self.rng = random.Random(f"shopsimrl-simulate/world/{seed}")
        self.prompt_ids = [f"prompt-{i:05d}" for i in range(params.prompts)]
        d = params.directions
        #: each prompt's kind (all 0 without directions), and the policy's stance (worlds with directions only)
        self.kind_of = draw_kinds(params.prompts, d, params.majority_share, seed) if d else [0] * params.prompts
        self.stance = Stance(params.geometry()) if d else None
        #: per training step, how many informative groups of each kind were trained (worlds with directions)
        self.trained_kinds: list[list[int]] = []
        #: informative groups trained per prompt (counted with novelty < 1 only)
        self.times_trained = [0] * params.prompts
        shift = [params.kind_difficulty_step * k / (d - 1) for k in range(d)] if d else [0.0]
        self.difficulty = [self.rng.gauss(params.difficulty_mean + shift[k], params.difficulty_sd)
                           for k in self.kind_of]
        self.bonus = [0.0] * params.prompts
        self.skill = 0.0
        self.informative_trained = 0
        self._index = {pid: i for i, pid in enumerate(self.prompt_ids)}
        k = params.clusters
        #: each prompt's cluster (all 0 without clusters), and each cluster's skill (clustered worlds only)
        self.cluster_of = [i % k for i in range(params.prompts)] if k else [0] * params.prompts
        self.cluster_skill = [0.0] * k

    @property
    def clustered(self) -> bool:
        return self.params.clusters > 0

    def cluster_labels(self) -> dict[str, int] | None:
        """Each prompt's cluster, as the selector takes it (``None`` in a world without clusters)."""
        return dict(zip(self.prompt_ids, self.cluster_of)) if self.clustered else None

    def cluster(self, prompt_id: str) -> int:
        return self.cluster_of[self._index[prompt_id]]

    def _skill_of(self, i: int) -> float:
        return self.cluster_skill[self.cluster_of[i]] if self.clustered else self.skill

    def pass_rate(self, prompt_id: str) -> float:
        i = self._index[prompt_id]
        if self.stance is not None:
            return sigmoid(self.skill + self.bonus[i] - self.difficulty[i] + self.stance.gain(self.kind_of[i]))
        return sigmoid(self._skill_of(i) + self.bonus[i] - self.difficulty[i])

    def kind_pass_rates(self) -> list[float]:
        """Mean pass rate per kind (worlds with directions; one figure, the mean, without)."""
        gains = self.stance.gains() if self.stance is not None else [0.0]
        totals, counts = [0.0] * len(gains), [0] * len(gains)
        for k, b, d in zip(self.kind_of, self.bonus, self.difficulty):
            totals[k] += sigmoid(self.skill + b - d + gains[k])
            counts[k] += 1
        return [t / n if n else float("nan") for t, n in zip(totals, counts)]

    def mean_pass_rate(self) -> float:
        if self.stance is not None:
            gains = self.stance.gains()
            return sum(sigmoid(self.skill + b - d + gains[k])
                       for k, b, d in zip(self.kind_of, self.bonus, self.difficulty)) / len(self.difficulty)
        if self.clustered:
            return sum(sigmoid(self._skill_of(i) + b - d)
                       for i, (b, d) in enumerate(zip(self.bonus, self.difficulty))) / len(self.difficulty)
        return sum(sigmoid(self.skill + b - d) for b, d in zip(self.bonus, self.difficulty)) / len(self.difficulty)

    def cluster_pass_rates(self) -> list[float]:
        """Mean pass rate per cluster (one figure, the mean, without clusters)."""
        k = max(1, self.params.clusters)
        totals, counts = [0.0] * k, [0] * k
        for i, (b, d) in enumerate(zip(self.bonus, self.difficulty)):
            c = self.cluster_of[i]
            totals[c] += sigmoid(self._skill_of(i) + b - d)
            counts[c] += 1
        return [t / n for t, n in zip(totals, counts)]

    def play_group(self, prompt_id: str, n: int) -> tuple[list[float] | None, float]:
        """One group: its rewards (``None`` = technical) and how long it takes."""
        rewards, durations = self.play_siblings(prompt_id, n)
        return rewards, max(durations)

    def play_siblings(self, prompt_id: str, n: int) -> tuple[list[float] | None, list[float]]:
        """One group: its rewards (``None`` = technical) and each sibling's solo duration (the same draws)."""
        rng = self.rng
        p = self.pass_rate(prompt_id)
        rewards = [1.0 if rng.random() < p else 0.0 for _ in range(n)]
        mu, sigma = math.log(self.params.episode_median_s), self.params.episode_sigma
        durations = [rng.lognormvariate(mu, sigma) for _ in range(n)]
        if rng.random() < self.params.technical_rate:
            return None, durations
        return rewards, durations

    def train(self, informative_prompts: list[str]) -> None:
        """One optimizer step on the kept batch: only groups with spread move the policy."""
        if self.clustered:
            self._train_clusters(informative_prompts)
        elif self.params.novelty < 1.0:
            for pid in informative_prompts:
                i = self._index[pid]
                teach = self.params.eta_global * self.params.novelty ** self.times_trained[i]
                self.skill += teach * (1.0 - self.skill / self.params.skill_cap)
                self.times_trained[i] += 1
        else:
            for _ in informative_prompts:
                self.skill += self.params.eta_global * (1.0 - self.skill / self.params.skill_cap)
        for pid in informative_prompts:
            self.bonus[self._index[pid]] += self.params.eta_prompt
        if self.stance is not None:
            kinds = [self.kind_of[self._index[pid]] for pid in informative_prompts]
            self.stance.train(kinds)
            self.trained_kinds.append([kinds.count(k) for k in range(self.params.directions)])
        self.informative_trained += len(informative_prompts)

    def _train_clusters(self, informative_prompts: list[str]) -> None:
        p = self.params
        skills, k, cap = self.cluster_skill, p.clusters, p.skill_cap
        shared, own = p.transfer * p.eta_global, (1.0 - p.transfer) * k * p.eta_global
        for pid in informative_prompts:
            c = self.cluster_of[self._index[pid]]
            gain = own * (1.0 - skills[c] / cap)
            if shared:
                for j in range(k):
                    skills[j] += shared * (1.0 - skills[j] / cap)
            skills[c] += gain
