"""Fit the modelled GPU clock (``rollout/gputime.py``) to the release run's per-step ``rollout_time_s``.

The main job's seed order with fixed waves starts one wave of 32 groups x 8 episodes per step, all
at once, and nothing is aborted before the step ends, so each group's modelled finish is its slowest
episode's on the shared throughput with the whole wave in flight; the step ends where the real
``RolloutStep`` decides it does, given the groups' verdicts and those finish times
(:func:`shopsimrl.sampling.replay.replay`): at the 16th kept group.  Given the episodes of a real
run (each one's group, reward, seed, turns and pages, :class:`Played`), :func:`fit` searches
``FIT_GRID`` (reply tokens per action, the verbosity's spread, the engines' capacity) for the model
whose per-step makespans have the release's median and 10th-90th percentiles (:func:`loss`); the
benchmark (``benchmarks/bench_gpu_clock.py``) then runs the main job on the fitted clock and checks it
(:func:`check`): median within 10% of the release's, 10th-90th percentile range within 20%.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from shopsimrl.rollout.gputime import SharedThroughput, TimeModel
from shopsimrl.sampling.replay import replay
from shopsimrl.sampling.supply import SupplyExhausted
from shopsimrl.sampling.verdict import rewards_verdict
from shopsimrl.simulate.calibrate import release_rows

#: The targets: the median within this share of the release's, and the 10th-90th percentile range too.
MEDIAN_TOLERANCE = 0.10
RANGE_TOLERANCE = 0.20
#: The grid :func:`fit` searches (the other constants stay at the model's).
FIT_GRID: dict[str, tuple[float | None, ...]] = {
    "reply_tokens": (250.0, 300.0, 350.0, 400.0, 450.0, 500.0, 600.0, 700.0),
    "verbosity_sigma": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "capacity": (32.0, 64.0, 96.0, 128.0, 192.0, None),
}


@dataclass(frozen=True)
class Played:
    """One episode as the clock sees it: its group, reward (``None``: not scored), seed, turns, the characters
    of each page read, and its tokens if known."""

    group: int
    reward: float | None
    seed: int
    turns: int
    page_chars: tuple[int, ...]
    completion_tokens: int | None = None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linear between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Spread:
    """A series of step times as the targets read it."""

    median: float
    p10: float
    p90: float
    mean: float

    @property
    def range(self) -> float:
        return self.p90 - self.p10

    @classmethod
    def of(cls, times: Sequence[float]) -> Spread:
        return cls(percentile(times, 50), percentile(times, 10), percentile(times, 90), sum(times) / len(times))

    def as_dict(self) -> dict[str, float]:
        return {"median_s": round(self.median, 2), "p10_s": round(self.p10, 2), "p90_s": round(self.p90, 2),
                "p10_p90_range_s": round(self.range, 2), "mean_s": round(self.mean, 2)}


def release_step_times(path: str | Path) -> list[float]:
    """The release run's ``rollout_time_s``, one per step."""
    return [row["rollout_time_s"] for row in release_rows(path)]


def step_time(step: Sequence[Played], model: TimeModel) -> float:
    """One step's modelled time: every group started at once, each finishing with its slowest episode on the
    shared throughput, decided by the real step rules (the makespan when the step would need another wave)."""
    clock = SharedThroughput(model.capacity)
    for i, p in enumerate(step):
        clock.start(i, model.episode(p.seed, p.turns, p.page_chars, p.completion_tokens).solo_seconds)
    finish: dict[int, float] = {}
    while clock.in_flight:
        now, done = clock.next()
        for i in done:
            finish[step[i].group] = now  # type: ignore[index]
    rewards: dict[int, list[float | None]] = {}
    for p in step:
        rewards.setdefault(p.group, []).append(p.reward)
    supply = [(rewards_verdict(None if None in r else r), finish[g])  # type: ignore[arg-type]
              for g, r in sorted(rewards.items())]
    try:
        return replay(supply, max_consecutive_failed_groups=len(supply) + 1).end_time
    except SupplyExhausted:
        return max(finish.values())


def wave_times(steps: Sequence[Sequence[Played]], model: TimeModel) -> list[float]:
    """Each step's modelled time (:func:`step_time`)."""
    return [step_time(step, model) for step in steps]


def loss(sim: Spread, real: Spread) -> float:
    """Squared relative errors of the median and of both percentiles."""
    return sum(((a - b) / b) ** 2 for a, b in ((sim.median, real.median), (sim.p10, real.p10), (sim.p90, real.p90)))


def fit(steps: Sequence[Sequence[Played]], release: Sequence[float], base: TimeModel | None = None,
        grid: dict[str, tuple[float | None, ...]] | None = None) -> tuple[TimeModel, list[dict[str, object]]]:
    """The grid's model closest to the release's spread (:func:`loss`), and every row."""
    grid, base = grid or FIT_GRID, base or TimeModel()
    real = Spread.of(release)
    rows, best, best_loss = [], base, math.inf
    for values in itertools.product(*grid.values()):
        model = replace(base, **dict(zip(grid, values)))
        sim = Spread.of(wave_times(steps, model))
        value = loss(sim, real)
        rows.append({**dict(zip(grid, values)), **sim.as_dict(), "loss": round(value, 5)})
        if value < best_loss:
            best, best_loss = model, value
    return best, rows


def check(times: Sequence[float], release: Sequence[float]) -> dict[str, object]:
    """The targets: the median within ``MEDIAN_TOLERANCE`` of the release's, the range within ``RANGE_TOLERANCE``."""
    sim, real = Spread.of(times), Spread.of(release)
    median_off, range_off = sim.median / real.median - 1.0, sim.range / real.range - 1.0
    return {"modelled": sim.as_dict(), "release": real.as_dict(), "median_off": round(median_off, 4),
            "range_off": round(range_off, 4), "median_met": abs(median_off) <= MEDIAN_TOLERANCE,
            "range_met": abs(range_off) <= RANGE_TOLERANCE}
