"""Prompts that disagree about what to learn: a shared stance, pulled toward the prompts it is trained on.

The main job's GRPO learner showed it (docs/learning.md, "Why concentration hurts"): its
weights are shared, and its train prompts want different things from them.  For most, the
goal product is the first search result, and "trust the search engine's order" helps; for
the rest, "distrust result #1" helps, and it hurts the first kind.  A selector that trains
mostly the second kind (they are the ones near 50 %) lifts them and drops the others below
where they started.

The simulated form: each prompt has a **kind** ``k`` in ``0..K-1`` (``K`` = ``directions``)
and with it a unit **direction** ``u_k`` in the plane, at angle ``φ_k`` spread evenly from
``+α`` (kind 0, the majority) to ``−α`` (kind ``K − 1``).  The policy holds a **stance**
``θ`` in the unit disc, starting at 0 (the untrained policy favours no kind; the prompts'
difficulties hold where each starts).  A prompt's pass-rate logit gains ``w · (u_k · θ)``.
Each informative group trained on pulls the stance toward its prompt's direction::

    θ ← θ + η · (u_k − θ)

so the stance is a moving average of the directions of the groups trained on: a run that
trains every kind as often as the data's own order brings it ends near the population's
mean direction (every kind gains a little, the majority most), and a run that trains mostly
one kind ends at that kind's direction (``w`` for it, ``w · cos(φ_k − φ_j)`` for kind ``j``:
negative when the angle between them exceeds 90°).  Training a prompt more often multiplies
its weight in the average, which is the dose and response the learner showed.

Kind 0 holds ``majority_share`` of the prompts, the others share the rest equally.  Kind
``k``'s difficulties are centred ``kind_difficulty_step × k / (K − 1)`` logits above the
world's ``difficulty_mean``: the learner's minority kind starts far below the majority.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DirectionGeometry:
    """The kinds' directions (``K >= 2``) and how strongly and how fast the stance follows training."""

    kinds: int
    angle_deg: float  # α: kind 0 at +α, kind K−1 at −α
    weight: float  # w: logits a prompt gains when the stance is its own direction
    rate: float  # η: the stance's step toward a trained prompt's direction, per informative group

    def __post_init__(self) -> None:
        if self.kinds < 2:
            raise ValueError(f"directions must be >= 2 (0: none), got {self.kinds}")
        if not 0.0 <= self.angle_deg <= 90.0:
            raise ValueError(f"direction angle must be within [0, 90] degrees, got {self.angle_deg}")
        if self.weight < 0.0 or not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"direction weight must be >= 0 and rate within [0, 1], got {self.weight}, {self.rate}")

    def unit(self, kind: int) -> tuple[float, float]:
        alpha = math.radians(self.angle_deg)
        phi = alpha * (1.0 - 2.0 * kind / (self.kinds - 1))
        return math.cos(phi), math.sin(phi)


def draw_kinds(prompts: int, kinds: int, majority_share: float, seed: int) -> list[int]:
    """Each prompt's kind, from a stream of its own (a world without directions draws nothing from it)."""
    rng = random.Random(f"shopsimrl-simulate/directions/{seed}")
    rest = (1.0 - majority_share) / (kinds - 1)
    out = []
    for _ in range(prompts):
        u = rng.random()
        out.append(0 if u < majority_share else min(kinds - 1, 1 + int((u - majority_share) / rest)))
    return out


class Stance:
    """The policy's stance ``θ`` and each kind's logit gain ``w · (u_k · θ)``."""

    def __init__(self, geometry: DirectionGeometry) -> None:
        self.geometry = geometry
        self.units = [geometry.unit(k) for k in range(geometry.kinds)]
        self.theta = (0.0, 0.0)

    def gain(self, kind: int) -> float:
        ux, uy = self.units[kind]
        return self.geometry.weight * (ux * self.theta[0] + uy * self.theta[1])

    def gains(self) -> list[float]:
        return [self.gain(k) for k in range(self.geometry.kinds)]

    def train(self, kinds: Sequence[int]) -> None:
        """One step toward each trained prompt's direction, in the order given."""
        eta = self.geometry.rate
        x, y = self.theta
        for k in kinds:
            ux, uy = self.units[k]
            x += eta * (ux - x)
            y += eta * (uy - y)
        self.theta = (x, y)
