"""slime's asynchronous loop against its synchronous one: wall time per trained informative group, per config.

Simulator wall time (modelled), not a GPU measurement: each rollout step is the simulator's
(the calibrated world, whose mean step is the release run's ``perf/rollout_time``); each step
then trains for ``CALIBRATED_TRAIN_S`` and syncs the weights for ``CALIBRATED_WEIGHT_SYNC_S``
(``shopsimrl/rollout/loops.py`` says where both come from).  ``train.py`` (``sync``) adds the
three; ``train_async.py`` (``async``) runs rollout k+1 beside training k, and every rollout
there plays the world one training step behind (the policy lag), so its groups differ.

Per config (seed, skip, spread; fixed and adaptive waves), medians over simulation
seeds 0-4 of 80 steps:

- each loop's informative groups trained, final mean pass rate, rollout and loop seconds per
  step, and loop seconds per trained informative group;
- ``async_over_sync``: async's seconds per informative group over sync's (paired by seed, the
  median of the ratios); ``overlap_only_over_sync``: the sync run's own rollouts timed by the
  async schedule, i.e. the overlap alone, without the policy lag's change in groups;
- ``sensitivity``: ``async_over_sync`` when training takes other times per step (the runs do not
  depend on the training time: each is re-timed, not re-run).

``python -m benchmarks.bench_async_loop [--quick] [--train-s S] [--weight-sync-s U]``: other times
write ``benchmarks/results/async_loop_<S>s.json`` beside the calibrated result.
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone
from statistics import median
from typing import Any

from benchmarks.common import machine, publish
from shopsimrl.rollout.loops import (
    CALIBRATED_TRAIN_S,
    CALIBRATED_WEIGHT_SYNC_S,
    TrainingLoop,
    TrainTiming,
    loop_wall_s,
)
from shopsimrl.simulate.engine import RunResult, simulate_run

STEPS = 80
SEEDS = (0, 1, 2, 3, 4)
QUICK_SEEDS = (0, 1)
CONFIGURATIONS = (
    ("seed", "fixed"),
    ("skip", "fixed"),
    ("spread", "fixed"),
    ("seed", "adaptive"),
    ("skip", "adaptive"),
    ("spread", "adaptive"),
)
#: The release run's mean rollout step (s), for the sensitivity's ratios of training to rollout time.
RELEASE_ROLLOUT_S = 227.94625
#: Training seconds per step re-timed in ``sensitivity``, and why each.
SENSITIVITY_TRAIN_S: dict[str, float] = {
    "0 (no training time: nothing to hide)": 0.0,
    "8.4 (vime#244's time per sample, same tokens per sample)": 8.4,
    f"{CALIBRATED_TRAIN_S:g} (calibrated: scaled to the release's token budget)": CALIBRATED_TRAIN_S,
    "161 (vime#244's train/rollout ratio 16.8/23.8 on the release's rollout)": 161.0,
    "228 (training as long as the mean rollout)": round(RELEASE_ROLLOUT_S),
    "456 (training twice the mean rollout)": 2 * round(RELEASE_ROLLOUT_S),
}
PER_GROUP = "loop_wall_s_per_informative_group"
LOOP_FIGURES = ("informative_trained", "final_mean_pass_rate", "mean_step_wall_s", "loop_mean_step_wall_s", PER_GROUP)


def _per_informative(run: RunResult, timing: TrainTiming, loop: TrainingLoop | None = None) -> float:
    """Loop seconds per informative group trained; ``loop`` re-times the run's rollouts under another loop."""
    accepted = sum(r.accepted for r in run.steps)
    return loop_wall_s(loop or run.loop, [r.wall_s for r in run.steps], timing) / accepted


def main(quick: bool = False, train_s: float = CALIBRATED_TRAIN_S,
         weight_sync_s: float = CALIBRATED_WEIGHT_SYNC_S) -> dict[str, Any]:
    seeds = QUICK_SEEDS if quick else SEEDS
    timing = TrainTiming(train_s, weight_sync_s)
    runs = {loop: {f"{sel}/{waves}": [simulate_run(selection=sel, waves=waves, steps=STEPS, seed=s, loop=loop,
                                                   timing=timing) for s in seeds]
                   for sel, waves in CONFIGURATIONS}
            for loop in TrainingLoop}
    summary: dict[str, Any] = {}
    for label in runs[TrainingLoop.SYNC]:
        sync, late = runs[TrainingLoop.SYNC][label], runs[TrainingLoop.ASYNC][label]
        summary[label] = {
            **{loop.value: {key: median(r.summary(8)[key] for r in runs[loop][label]) for key in LOOP_FIGURES}
               for loop in TrainingLoop},
            "async_over_sync": median(_per_informative(a, timing) / _per_informative(s, timing)
                                      for s, a in zip(sync, late)),
            "overlap_only_over_sync": median(_per_informative(s, timing, TrainingLoop.ASYNC)
                                             / _per_informative(s, timing) for s in sync),
        }
    sensitivity = {
        name: {label: median(_per_informative(a, t) / _per_informative(s, t)
                             for s, a in zip(runs[TrainingLoop.SYNC][label], runs[TrainingLoop.ASYNC][label]))
               for label in summary}
        for name, t in ((name, TrainTiming(value, weight_sync_s)) for name, value in SENSITIVITY_TRAIN_S.items())
    }
    results: dict[str, Any] = {
        "machine": f"{machine()}, {os.cpu_count()} cores",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "figures": "simulator wall time (modelled): simulated rollouts plus the stated training and weight-sync "
                   "times, scheduled as slime's train.py and train_async.py order them; not measured on a GPU",
        "world": "calibrated (the fit to the public release run)",
        "steps": STEPS,
        "seeds": list(seeds),
        "timing": timing.as_dict(),
        "summary": summary,
        "sensitivity_async_over_sync": sensitivity,
    }
    calibrated = train_s == CALIBRATED_TRAIN_S and weight_sync_s == CALIBRATED_WEIGHT_SYNC_S
    path = "benchmarks/results/async_loop.json" if calibrated else f"benchmarks/results/async_loop_{train_s:g}s.json"
    publish(path, results, shown={label: {"sync_s_per_informative_group": row["sync"][PER_GROUP],
                                          "async_s_per_informative_group": row["async"][PER_GROUP],
                                          "async_over_sync": row["async_over_sync"],
                                          "overlap_only_over_sync": row["overlap_only_over_sync"]}
                                  for label, row in summary.items()})
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="seeds 0-1 instead of 0-4")
    parser.add_argument("--train-s", type=float, default=CALIBRATED_TRAIN_S, help="training seconds per step")
    parser.add_argument("--weight-sync-s", type=float, default=CALIBRATED_WEIGHT_SYNC_S,
                        help="weight-sync seconds per step")
    args = parser.parse_args()
    try:
        TrainTiming(args.train_s, args.weight_sync_s)
    except ValueError as exc:
        parser.exit(2, f"bench_async_loop: {exc}\n")
    main(quick=args.quick, train_s=args.train_s, weight_sync_s=args.weight_sync_s)
