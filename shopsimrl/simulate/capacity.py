"""The inference engine's capacity: episodes in flight share its throughput, so wall time is honest.

Each episode has a solo duration (the world's log-normal draw).  With ``m`` episodes in
flight, each runs at ``min(1, C / m)`` of its solo speed (processor sharing): an engine
busy with more than ``C`` episodes slows every one of them down, and an episode not
started (a second stage never run, a group stopped early) frees throughput for the rest.
:class:`~shopsimrl.rollout.gputime.SharedThroughput` is that clock (the one the main job's modelled clock
runs on); :func:`calibrate_capacity` chooses ``C`` so
that the seed's wave of ``over_sampling_batch_size`` groups (all siblings at once) takes
the release run's mean step time.  ``C = None`` is the simulator's default: no sharing.

Pure: the clock is simulated time, nothing here reads a real one.
"""

from __future__ import annotations

import math
import random
from statistics import median

from shopsimrl.rollout.gputime import RELEASE_MEAN_STEP_S, SharedThroughput, makespan

#: Waves drawn (common random numbers) to calibrate ``C``; the median makespan is matched.
CALIBRATION_WAVES = 101
__all__ = ["RELEASE_MEAN_STEP_S", "SharedThroughput", "calibrate_capacity", "makespan"]


def calibrate_capacity(
    episodes_per_wave: int,
    episode_median_s: float,
    episode_sigma: float,
    target_s: float = RELEASE_MEAN_STEP_S,
    *,
    waves: int = CALIBRATION_WAVES,
    seed: int = 0,
) -> float:
    """``C`` (episodes at full speed) such that the median makespan of one wave is ``target_s``.

    With no sharing a wave already takes longer than ``target_s`` when ``C`` would have to exceed
    the wave: then ``C`` is the wave's size (no sharing within it).
    """
    rng = random.Random(f"shopsimrl-simulate/capacity/{seed}")
    mu = math.log(episode_median_s)
    draws = [[rng.lognormvariate(mu, episode_sigma) for _ in range(episodes_per_wave)] for _ in range(waves)]

    def span(c: float) -> float:
        return median(makespan(d, c) for d in draws)

    high = float(episodes_per_wave)
    if span(high) >= target_s:
        return high
    low = 1.0
    for _ in range(40):  # makespan falls as C grows: bisection
        mid = 0.5 * (low + high)
        if span(mid) > target_s:
            low = mid
        else:
            high = mid
    return round(0.5 * (low + high), 2)
