"""An oracle selector for the simulator only: it reads the world's true pass rates.

It is not a selection anyone can run; it bounds what any prompt selector could do in
a given simulated world (it always starts the prompts least likely to give a
zero-spread group), so a target the oracle misses is out of reach of every selector
in that world.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from shopsimrl.sampling.estimate import zero_spread_probability
from shopsimrl.sampling.modes import Choice
from shopsimrl.sampling.order import SeedOrder
from shopsimrl.sampling.spread import SpreadSelector
from shopsimrl.simulate.model import World


class Oracle(Choice):
    """The simulator's own selections beside :class:`~shopsimrl.sampling.modes.Selection`: upper bounds, never run
    for real."""

    TRUE = "oracle"  # picks and predicts from every prompt's true pass rate
    SEEN = "seen-oracle"  # the true pass rates of the prompts seen so far only


class OracleSelector(SeedOrder):
    """``SeedOrder`` whose picks and predictions use the true pass rates of ``world``."""

    def __init__(self, world: World, n_samples_per_prompt: int, seed: int, *, clusters: Any = None) -> None:
        super().__init__(world.prompt_ids, n_samples_per_prompt, seed=seed, clusters=clusters)
        self.selection = Oracle.TRUE.value  # type: ignore[misc]
        self.world = world

    def _true_z(self, i: int) -> float:
        return zero_spread_probability(self.world.pass_rate(self._ids[i]), self.n)

    def _pick(self, k: int) -> list[int]:
        free = [i for i in range(len(self._ids)) if i not in self.evidence.in_flight]
        free.sort(key=self._true_z)
        return [self._take(i) for i in free[:k]]

    def predicted_zero_spread(self, prompt_id: Hashable) -> float:
        return self._true_z(self.evidence.index(prompt_id))

    def release(self, prompt_id: Hashable, rewards=None) -> None:  # type: ignore[no-untyped-def]
        self.evidence.land(self.evidence.flying(prompt_id, "release"))


class SeenOracleSelector(SpreadSelector):
    """``spread`` selection that knows the true pass rate of every prompt it has observed, and nothing of the rest.

    It explores never-seen prompts by the same rules as ``spread`` and then always
    starts the observed prompt least likely to give zero spread.  The gap between it
    and ``spread`` is what better estimates could still win; the gap between it
    and :class:`OracleSelector` is the price of having to try prompts to learn them.
    """

    def __init__(self, world: World, n_samples_per_prompt: int, seed: int,
                 explore_horizon_epochs: float | None = None, *, clusters: Any = None) -> None:
        super().__init__(world.prompt_ids, n_samples_per_prompt, seed=seed,
                         explore_horizon_epochs=explore_horizon_epochs, clusters=clusters)
        self.world = world

    def _true_z(self, i: int) -> float:
        return zero_spread_probability(self.world.pass_rate(self._ids[i]), self.n)

    def _nearest(self) -> int | None:
        waiting = self._bucket_of  # observed prompts out of flight (of every cluster)
        return min(waiting, key=self._true_z) if waiting else None

    def _predict(self, i: int) -> float:
        return self._true_z(i) if self.evidence.observed[i] else super()._predict(i)
