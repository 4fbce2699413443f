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

A group is ``n`` Bernoulli(``p_i``) rewards; with probability ``technical_rate`` it is
unscorable instead.  An episode lasts a log-normal time; a group finishes when its
slowest sibling does (siblings run concurrently, and so do all groups in flight).

The defaults are the calibration to the public 80-step release run (see
``calibrate.py`` and docs/efficient-sampling.md for the fit).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from shopsimrl.sampling.estimate import sigmoid


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

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class World:
    """One run's prompts and policy; every draw comes from ``rng`` (seeded by the caller)."""

    def __init__(self, params: WorldParams, seed: int) -> None:
        self.params = params
        self.rng = random.Random(f"shopsimrl-simulate/world/{seed}")
        self.prompt_ids = [f"prompt-{i:05d}" for i in range(params.prompts)]
        self.difficulty = [self.rng.gauss(params.difficulty_mean, params.difficulty_sd) for _ in self.prompt_ids]
        self.bonus = [0.0] * params.prompts
        self.skill = 0.0
        self.informative_trained = 0
        self._index = {pid: i for i, pid in enumerate(self.prompt_ids)}

    def pass_rate(self, prompt_id: str) -> float:
        i = self._index[prompt_id]
        return sigmoid(self.skill + self.bonus[i] - self.difficulty[i])

    def mean_pass_rate(self) -> float:
        return sum(sigmoid(self.skill + b - d) for b, d in zip(self.bonus, self.difficulty)) / len(self.difficulty)

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
        for _ in informative_prompts:
            self.skill += self.params.eta_global * (1.0 - self.skill / self.params.skill_cap)
        for pid in informative_prompts:
            self.bonus[self._index[pid]] += self.params.eta_prompt
        self.informative_trained += len(informative_prompts)
