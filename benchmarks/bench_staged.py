"""Staged siblings (R29) in the simulator: the threshold chosen on tuning seeds, the figures on seeds 0-2.

Every row runs under the capacity model (``shopsimrl/simulate/capacity.py``: episodes in flight
share the engine's throughput, ``C`` calibrated so that the seed's wave of 32 groups takes the
release run's mean step time), with and without staging, side by side on the same worlds:

- ``tuning``: seeds 100-104, ``K = 4``, the grid below (skip ``q`` x threshold), for ``seed/fixed``
  and ``skip/adaptive``; the default pair is the one with the most informative groups per
  1,000 generated episodes for ``seed/fixed`` among the pairs where both configs keep their final
  pass rate within 0.01 of their unstaged rows and ``skip/adaptive``'s wall time per
  informative group stays within ``WALL_BUDGET`` (+10%) of its unstaged row (ties: the lower
  threshold, then the lower skip ``q``): a default that saves episodes on the seed's path must not
  slow the fastest config by half;
- ``report``: seeds 0-2, the four configs, the default staging (``shopsimrl simulate
  --siblings staged`` computes the same rows), and the issue's targets;
- ``sensitivity``: ``K`` = 2, 3 on seeds 0-2 for ``seed/fixed``; skip ``q`` = 1.0 (every group
  staged: a few more early stops, a second round of latency for every group); and no capacity model (every episode at
  solo speed), where the second round of latency is all staging adds.

Not timed: the figures are simulated (two worker processes share the runs; each run is deterministic).
"""

from __future__ import annotations

from concurrent.futures import Executor, ProcessPoolExecutor
from datetime import datetime, timezone
from functools import partial
from statistics import median
from typing import Any

from benchmarks.common import command_line, machine, publish
from shopsimrl.defaults import DEFAULT_STAGE_SKIP_Q, DEFAULT_STAGE_THRESHOLD
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.simulate.capacity import calibrate_capacity
from shopsimrl.simulate.engine import simulate_run
from shopsimrl.simulate.model import WorldParams
from shopsimrl.simulate.side_by_side import SUMMARY_KEYS, compare

TUNING_SEEDS = (100, 101, 102, 103, 104)
REPORT_SEEDS = (0, 1, 2)
THRESHOLDS = (0.1, 0.15, 0.175, 0.2, 0.25, 0.3)
SKIP_QS = (0.5, 1.0)
#: Most wall time per informative group the default may cost skip/adaptive, over its unstaged row.
WALL_BUDGET = 1.10
CONFIGURATIONS = (("seed", "fixed"), ("skip", "fixed"), ("seed", "adaptive"), ("skip", "adaptive"))
KEYS = (*SUMMARY_KEYS, "stopped_early", "episodes_saved_by_staging", "generated_episodes")


def staged_targets(summary: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Staged siblings (R29): the issue's targets on the medians, and wall time per informative group."""
    key, wall = "informative_per_1k_generated_episodes", "wall_s_per_informative_group"
    out: dict[str, dict[str, Any]] = {}
    seed, seed_staged = summary.get("seed/fixed"), summary.get("seed/fixed+staged")
    if seed and seed_staged:
        ratio = seed_staged[key] / seed[key]
        out["staged: seed/fixed+staged informative per 1k vs seed/fixed >= 1.25x"] = {"value": ratio,
                                                                                       "met": ratio >= 1.25}
    ada, ada_staged = summary.get("skip/adaptive"), summary.get("skip/adaptive+staged")
    if ada and ada_staged:
        out["staged: skip/adaptive+staged informative per 1k >= 100"] = {
            "value": ada_staged[key], "met": ada_staged[key] >= 100.0}
        gap = ada_staged["final_mean_pass_rate"] - ada["final_mean_pass_rate"]
        out["staged: skip/adaptive+staged final pass rate within 0.01"] = {"value": gap,
                                                                                  "met": abs(gap) <= 0.01}
    for label, row in summary.items():
        base = summary.get(label.removesuffix("+staged")) if label.endswith("+staged") else None
        if base:
            out[f"staged: {label} wall s per informative group vs without (report)"] = {
                "value": row[wall] / base[wall], "met": None}
    return out


def _summary(seed: int, selection: str, waves: str, steps: int, kw: dict) -> dict:
    return simulate_run(selection=selection, waves=waves, steps=steps, seed=seed, **kw).summary(8)


def medians(pool: Executor, selection: str, waves: str, seeds, steps: int, **kw) -> dict[str, float]:
    runs = list(pool.map(partial(_summary, selection=selection, waves=waves, steps=steps, kw=kw), seeds))
    return {k: round(median(r[k] for r in runs), 4) for k in KEYS}


def main(quick: bool = False) -> dict[str, object]:
    with ProcessPoolExecutor(2) as pool:
        return _main(pool, quick)


def _choose(tuning: dict[str, dict[str, object]]) -> dict[str, float] | None:
    """The default (skip ``q``, threshold): the module docstring's rule over the tuning rows."""
    seed, fast = tuning["seed/fixed"], tuning["skip/adaptive"]
    grid = dict(zip(seed["staged_by_skip_q_and_threshold"], ((q, t) for q in SKIP_QS for t in THRESHOLDS)))  # type: ignore[arg-type]

    def within(rows: dict[str, object], key: str) -> bool:
        row, base = rows["staged_by_skip_q_and_threshold"][key], rows["unstaged"]  # type: ignore[index]
        return abs(row["final_mean_pass_rate"] - base["final_mean_pass_rate"]) <= 0.01  # type: ignore[index]

    fast_rows, fast_base = fast["staged_by_skip_q_and_threshold"], fast["unstaged"]
    ok = [(row["informative_per_1k_generated_episodes"], -grid[key][1], -grid[key][0])
          for key, row in seed["staged_by_skip_q_and_threshold"].items()  # type: ignore[union-attr]
          if within(seed, key) and within(fast, key)
          and fast_rows[key]["wall_s_per_informative_group"]  # type: ignore[index]
          <= WALL_BUDGET * fast_base["wall_s_per_informative_group"]]  # type: ignore[index]
    best = max(ok) if ok else None
    return {"skip_q": -best[2], "threshold": -best[1]} if best else None


def _main(pool: Executor, quick: bool) -> dict[str, object]:
    steps = 40 if quick else 80
    tuning_seeds = TUNING_SEEDS[:2] if quick else TUNING_SEEDS
    world = WorldParams()
    capacity = calibrate_capacity(32 * 8, world.episode_median_s, world.episode_sigma)
    tuning: dict[str, object] = {}
    for selection, waves in (("seed", "fixed"), ("skip", "adaptive")):
        base = medians(pool, selection, waves, tuning_seeds, steps, capacity=capacity)
        rows = {f"skip_q={q} threshold={t}": medians(pool, selection, waves, tuning_seeds, steps, capacity=capacity,
                                                     staging=StagedSiblings.of(8, threshold=t, skip_q=q))
                for q in SKIP_QS for t in THRESHOLDS}
        tuning[f"{selection}/{waves}"] = {"unstaged": base, "staged_by_skip_q_and_threshold": rows}
    chosen = _choose(tuning)
    out = compare(steps=steps, seeds=REPORT_SEEDS, world=world, configs=CONFIGURATIONS,
                  staging=StagedSiblings.of(8), capacity=capacity)
    sensitivity = {
        **{f"seed/fixed+staged K={k}": medians(pool, "seed", "fixed", REPORT_SEEDS, steps, capacity=capacity,
                                               staging=StagedSiblings.of(8, k)) for k in (2, 3)},
        **{f"{s}/{w}+staged skip_q=1.0": medians(pool, s, w, REPORT_SEEDS, steps, capacity=capacity,
                                                  staging=StagedSiblings.of(8, skip_q=1.0))
           for s, w in (("seed", "fixed"), ("skip", "adaptive"))},
        **{f"{s}/{w} no capacity model": medians(pool, s, w, REPORT_SEEDS, steps) for s, w in
           (("seed", "fixed"), ("skip", "adaptive"))},
        **{f"{s}/{w}+staged no capacity model": medians(pool, s, w, REPORT_SEEDS, steps, staging=StagedSiblings.of(8))
           for s, w in (("seed", "fixed"), ("skip", "adaptive"))},
    }
    results: dict[str, object] = {
        "machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "steps": steps,
        "capacity_episodes": capacity,
        "default": {"skip_q": DEFAULT_STAGE_SKIP_Q, "threshold": DEFAULT_STAGE_THRESHOLD},
        "chosen_on_tuning_seeds": chosen, "tuning_seeds": list(tuning_seeds), "tuning": tuning,
        "report_seeds": list(REPORT_SEEDS), "report": out["summary"], "targets": staged_targets(out["summary"]),
        "sensitivity": sensitivity,
    }
    publish("benchmarks/results/staged.json", results,
            shown={k: results[k] for k in ("capacity_episodes", "default", "chosen_on_tuning_seeds", "report",
                                           "targets", "sensitivity")})
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
