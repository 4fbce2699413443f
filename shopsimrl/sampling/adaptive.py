"""Adaptive wave size: submit what is predicted to fill the batch plus a small cushion, and top up in small refills.

slime's loop submits a whole wave of ``over_sampling_batch_size`` groups whenever
``remaining < rollout_batch_size``.  With per-prompt predictions of zero spread
(:class:`~shopsimrl.sampling.evidence.Evidence`, every selector's) we can instead keep just
the predicted number of groups in flight: each group in flight is informative
with probability ``q = 1 − ẑ``, so the expected number of informative groups
among them is ``Σ q``, and the rule is

    Σ q (groups in flight)  >=  (target − kept) + cushion

After every decision the step's wave sizer
(:class:`~shopsimrl.sampling.step.AdaptiveRefills`) asks this rule how many groups to
add (usually 0 or 1: one group per informative completion, a bit more after a
zero-spread one) and submits them with :meth:`WaveController.refill`.
Every completion tops the set up again, so a shortfall costs one more group's
latency, while a surplus costs the groups aborted at step end.  The cushion may be
negative (``DEFAULT_CUSHION``): fewer groups in flight than expected to fill the
batch, but never fewer than are missing.  When exactly the missing number is in
flight, ``remaining`` equals the target, so the controller's fallback keeps a
zero-spread group instead of dropping it: fewer episodes are generated (and
aborted) per trained one, and fewer of the trained groups are informative.  The step's
submissions, with the turns its selector skipped, stay within
``over_sampling_batch_size`` (what slime's first wave submits), except where slime
itself would open a new wave: when ``remaining`` would fall below the target.

The ``q`` of a never-seen prompt is the selector's prior for it.  With cluster labels
that is its cluster's estimate (the share of the cluster's first groups with spread),
and for a cluster never tried the share of clusters whose first group had spread: where
learning stays inside clusters, a cluster the policy has not learned yet is worth more
than a never-seen prompt of a cluster it has, and the sum above counts it so.

Everything else is the controller's, unchanged: the filter, ``remaining``, the
fallback (a zero-std group is kept once ``remaining <= target``), abort at
``target`` kept, the consecutive-failure stop.

:func:`prob_at_least` (the exact Poisson-binomial tail) gives the chance that the
groups in flight fill the batch; the drivers do not size by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from shopsimrl.defaults import DEFAULT_CUSHION
from shopsimrl.sampling.modes import WAVE_MODES, WaveMode
from shopsimrl.sampling.spread import EXPLORE_HORIZON_EPOCHS

__all__ = ["ADAPTIVE_EXPLORE_HORIZON_EPOCHS", "WAVE_MODES", "AdaptiveWaves", "horizon_for_waves",
           "prob_at_least"]

T = TypeVar("T")

#: The prompt selector's exploration horizon under adaptive waves, in epochs' worth of picks: every pick is paid
#: for there, so never-seen prompts are tried over a longer horizon than under fixed waves (chosen on simulation
#: seeds 100-104 among 2, 4 and 8; see docs/selection.md).
ADAPTIVE_EXPLORE_HORIZON_EPOCHS = 8.0


def horizon_for_waves(waves: WaveMode | str) -> float:
    """The selector's exploration horizon (epochs' worth of picks) under a wave mode."""
    return ADAPTIVE_EXPLORE_HORIZON_EPOCHS if WaveMode.parse(waves) is WaveMode.ADAPTIVE else EXPLORE_HORIZON_EPOCHS


def prob_at_least(qs: Sequence[float], k: int) -> float:
    """P(at least ``k`` successes) for independent Bernoulli(``q``) trials (Poisson-binomial tail), O(len·k)."""
    if k <= 0:
        return 1.0
    if k > len(qs):
        return 0.0
    # dist[j] = P(exactly j successes) for j < k; dist[k] accumulates "k or more".
    dist = [1.0] + [0.0] * k
    for q in qs:
        q = min(1.0, max(0.0, q))
        dist[k] = dist[k] + dist[k - 1] * q
        for j in range(k - 1, 0, -1):
            dist[j] = dist[j] * (1.0 - q) + dist[j - 1] * q
        dist[0] *= 1.0 - q
    return dist[k]


class AdaptiveWaves:
    """The adaptive wave mode's rule: how many groups to add now (the controller decides everything else).

    A step's wave sizer (:class:`~shopsimrl.sampling.step.AdaptiveRefills`) holds it as its ``rule``.
    """

    def __init__(self, target: int, max_in_flight: int, cushion: float = DEFAULT_CUSHION) -> None:
        """``cushion``: expected informative groups kept in flight above the number still missing (negative:
        fewer, never fewer groups than are missing); ``max_in_flight``: the step's submissions budget."""
        if not math.isfinite(cushion):
            raise ValueError(f"cushion must be a finite number (expected informative groups), got {cushion!r}")
        if target < 1 or max_in_flight < target:
            raise ValueError(f"need 1 <= target ({target}) <= max_in_flight ({max_in_flight})")
        self.target = target
        self.max_in_flight = max_in_flight
        self.cushion = cushion

    def refill_size(
        self,
        kept: int,
        in_flight_chances: Sequence[float],
        next_chance: Callable[[int], float],
        submitted: int = 0,
        skipped: Callable[[], int] = lambda: 0,
    ) -> int:
        """Groups to submit now.

        ``in_flight_chances``: each group in flight's predicted chance of spread (``q``);
        ``next_chance(j)``: that of the ``j``-th group we add (the sizer takes the
        selector's next prompt there); ``submitted``: groups already submitted this
        step; ``skipped()``: turns of the prompt order the source has skipped this step so
        far (asked again after every pick, since picking may skip).  Always enough to keep
        ``kept + in_flight >= target`` (slime's invariant ``remaining >= target``: where slime opens a new wave); beyond
        that, more while the expected informative groups in flight fall short of
        the missing number plus the cushion, as long as the step's submissions and
        skipped turns stay within ``max_in_flight`` (one wave's worth, slime's
        ``over_sampling_batch_size``): a skipped turn costs the budget what a group
        costs, so a step walks at most the seed order's wave of turns and a skip saves
        episodes rather than speeding the epoch passes.  Past that budget the fallback
        takes over, exactly as after slime's first wave.
        """
        needed = self.target - kept
        if needed <= 0:
            return 0
        count = len(in_flight_chances)
        expected = sum(min(1.0, max(0.0, q)) for q in in_flight_chances)
        goal = needed + self.cushion
        add = 0
        while count < needed or (submitted + skipped() + add < self.max_in_flight and expected < goal):
            expected += min(1.0, max(0.0, next_chance(add)))
            count += 1
            add += 1
        return add

    def choose(
        self,
        kept: int,
        in_flight_chances: Sequence[float],
        pick: Callable[[], tuple[T, float]],
        submitted: int = 0,
        skipped: Callable[[], int] = lambda: 0,
    ) -> list[tuple[T, float]]:
        """:meth:`refill_size`'s rule, returning what to submit: ``pick()`` gives the next item to
        start and its predicted chance of spread; the result is every item picked, with it."""
        chosen: list[tuple[T, float]] = []

        def next_chance(_j: int) -> float:
            chosen.append(pick())
            return chosen[-1][1]

        self.refill_size(kept, in_flight_chances, next_chance, submitted, skipped)
        return chosen
