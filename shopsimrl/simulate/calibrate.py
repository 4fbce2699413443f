"""Fit the simulated world to the public release run (seed order, fixed waves of 32).

The release figures (one row per step, ``tests/data/shopsimrl_release_steps.csv``)
give, per round of 20 steps: the share of completed groups with zero spread, the
informative groups kept per step (16 − zero-std groups admitted by the fallback),
the episode success rate and the share of all-wrong groups.  :func:`fit` searches
the world's four learning parameters on a grid for the smallest squared error over
those 16 figures (seed order, averaged over several simulation seeds), then scales
the episode duration so the mean simulated step time equals the release's mean
``rollout_time_s`` (with the log-normal shape fixed, step time scales linearly with
the median).
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean

from shopsimrl.simulate.engine import RunResult, simulate_run
from shopsimrl.simulate.model import WorldParams

ROUND_STEPS = 20
SERIES = ("zero_spread_share", "informative_kept", "success_rate", "all_wrong_rate")


@dataclass(frozen=True)
class RoundFigures:
    """Per-round means (rounds of 20 steps) of the four series, and the mean step time."""

    zero_spread_share: tuple[float, ...]
    informative_kept: tuple[float, ...]
    success_rate: tuple[float, ...]
    all_wrong_rate: tuple[float, ...]
    mean_step_s: float

    def as_dict(self) -> dict[str, object]:
        return {name: [round(v, 4) for v in getattr(self, name)] for name in SERIES} | {
            "mean_step_s": round(self.mean_step_s, 1)
        }


def release_figures(path: str | Path) -> RoundFigures:
    """The release run's round figures from its per-step CSV."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    rounds: dict[int, list[dict[str, str]]] = {}
    for row in rows:
        rounds.setdefault(int(row["round"]), []).append(row)
    zero, kept, success, wrong = [], [], [], []
    for r in sorted(rounds):
        rs = rounds[r]
        scored = sum(int(x["completed_groups"]) - int(x["technical_drops"]) for x in rs)
        zero_groups = sum(int(x["zero_std_drops"]) + int(x["zero_std_groups_in_batch"]) for x in rs)
        zero.append(zero_groups / scored)
        kept.append(fmean(int(x["train_groups"]) - int(x["zero_std_groups_in_batch"]) for x in rs))
        success.append(fmean(float(x["success_rate"]) for x in rs))
        wrong.append(fmean(float(x["all_wrong_group_rate"]) for x in rs))
    return RoundFigures(tuple(zero), tuple(kept), tuple(success), tuple(wrong),
                        fmean(float(x["rollout_time_s"]) for x in rows))


def simulated_figures(runs: Sequence[RunResult]) -> RoundFigures:
    """The same figures for simulated runs (pooled over the runs)."""
    steps = [r for run in runs for r in run.steps]
    rounds: dict[int, list] = {}
    for rec in steps:
        rounds.setdefault((rec.step - 1) // ROUND_STEPS, []).append(rec)
    zero, kept, success, wrong = [], [], [], []
    for r in sorted(rounds):
        rs = rounds[r]
        scored = sum(x.scored_completed for x in rs)
        zero.append(sum(x.zero_spread_completed for x in rs) / scored)
        kept.append(fmean(x.accepted for x in rs))
        success.append(sum(x.successes for x in rs) / (8 * scored))
        wrong.append(sum(x.all_wrong_completed for x in rs) / scored)
    return RoundFigures(tuple(zero), tuple(kept), tuple(success), tuple(wrong), fmean(x.wall_s for x in steps))


def loss(sim: RoundFigures, real: RoundFigures) -> float:
    """Squared error over the 16 round figures; kept groups are scaled to a share of 16."""
    total = 0.0
    for name in SERIES:
        scale = 16.0 if name == "informative_kept" else 1.0
        total += sum(((a - b) / scale) ** 2 for a, b in zip(getattr(sim, name), getattr(real, name)))
    return total


def seed_runs(params: WorldParams, seeds: Iterable[int], steps: int = 80) -> list[RunResult]:
    return [simulate_run(selection="seed", waves="fixed", steps=steps, seed=s, world=params) for s in seeds]


def fit(
    real: RoundFigures,
    base: WorldParams = WorldParams(),
    *,
    seeds: Sequence[int] = (0, 1, 2),
    grid: dict[str, Sequence[float]] | None = None,
) -> tuple[WorldParams, float]:
    """Grid search of the learning parameters, then the duration scale; returns (params, loss)."""
    grid = grid or {
        "difficulty_mean": (-1.0, -0.6, -0.2),
        "difficulty_sd": (1.5, 2.0, 2.5, 3.0),
        "eta_global": (0.001, 0.002, 0.004),
        "eta_prompt": (0.25, 0.5, 1.0),
    }
    best: tuple[float, WorldParams] | None = None
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        params = replace(base, **dict(zip(names, values)))
        err = loss(simulated_figures(seed_runs(params, seeds)), real)
        if best is None or err < best[0]:
            best = (err, params)
    assert best is not None
    err, params = best
    sim = simulated_figures(seed_runs(params, seeds))
    params = replace(params, episode_median_s=params.episode_median_s * real.mean_step_s / sim.mean_step_s)
    return params, err
