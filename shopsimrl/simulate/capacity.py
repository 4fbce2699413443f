"""The inference engine's capacity: episodes in flight share its throughput, so wall time is honest.

Each episode has a solo duration (the world's log-normal draw).  With ``m`` episodes in
flight, each runs at ``min(1, C / m)`` of its solo speed (processor sharing): an engine
busy with more than ``C`` episodes slows every one of them down, and an episode not
started (a second stage never run, a group stopped early) frees throughput for the rest.
:class:`SharedThroughput` is that clock; :func:`calibrate_capacity` chooses ``C`` so
that the seed's wave of ``over_sampling_batch_size`` groups (all siblings at once) takes
the release run's mean step time.  ``C = None`` is the simulator's default: no sharing.

Pure: the clock is simulated time, nothing here reads a real one.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Hashable, Sequence
from statistics import median

#: Waves drawn (common random numbers) to calibrate ``C``; the median makespan is matched.
CALIBRATION_WAVES = 101
#: The release run's mean step time (s): ``perf/rollout_time`` over its 80 steps (tests/data, ``release_figures``).
RELEASE_MEAN_STEP_S = 227.94625


class SharedThroughput:
    """Processor sharing: ``start`` episodes, ``next`` gives the time and keys of the next to finish.

    Virtual time advances at the common rate ``min(1, C / in_flight)``; an episode of solo
    duration ``w`` started at virtual time ``v`` finishes when virtual time reaches ``v + w``.
    """

    def __init__(self, capacity: float | None) -> None:
        if capacity is not None and not capacity > 0.0:
            raise ValueError(f"capacity must be > 0 episodes (or None: no sharing), got {capacity!r}")
        self.capacity = capacity
        self.now = 0.0
        self._virtual = 0.0
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._cancelled: set[Hashable] = set()
        self.in_flight = 0

    def rate(self) -> float:
        c, m = self.capacity, self.in_flight
        return 1.0 if c is None or m <= c else c / m

    def start(self, key: Hashable, solo_seconds: float) -> None:
        heapq.heappush(self._heap, (self._virtual + solo_seconds, self._seq, key))
        self._seq += 1
        self.in_flight += 1

    def cancel(self, keys: Sequence[Hashable]) -> None:
        """Stop these episodes (aborted): they stop sharing the throughput at once."""
        fresh = set(keys) - self._cancelled
        self._cancelled |= fresh
        self.in_flight -= len(fresh)

    def next(self) -> tuple[float, list[Hashable]]:
        """Advance to the next finish; every episode finishing at that instant (``IndexError``: none in flight)."""
        heap, cancelled = self._heap, self._cancelled
        while heap and heap[0][2] in cancelled:
            cancelled.discard(heapq.heappop(heap)[2])
        if not heap:
            raise IndexError("no episode in flight")
        finish = heap[0][0]
        # no sharing: simulated time is virtual time (set, not summed, so it carries no rounding drift)
        self.now = finish if self.capacity is None else self.now + (finish - self._virtual) / self.rate()
        self._virtual = finish
        done: list[Hashable] = []
        while heap and (heap[0][0] == finish or heap[0][2] in cancelled):
            _f, _s, key = heapq.heappop(heap)
            if key in cancelled:
                cancelled.discard(key)
                continue
            done.append(key)
        self.in_flight -= len(done)
        return self.now, done


def makespan(durations: Sequence[float], capacity: float | None) -> float:
    """Wall time until every episode of one wave (all started at once) is done."""
    clock = SharedThroughput(capacity)
    for i, d in enumerate(durations):
        clock.start(i, d)
    end = 0.0
    while clock.in_flight:
        end, _ = clock.next()
    return end


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
