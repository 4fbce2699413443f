"""Fit the simulator's ``learner`` world (``calibrate_learner.LEARNER_2000``) to the main job's GRPO learner.

Input: the learner's per-kind measurements on the tuning seeds 100-104, made by::

    python -m benchmarks.bench_selection --only products_2000 --seeds 100 101 102 103 104 --keep DIR \
        --out benchmarks/results/selection_tuning.json
    python -m benchmarks.diagnose_selection DIR --kinds spread/fixed spread/adaptive \
        --seeds 100 101 102 103 104 --out benchmarks/results/selection_learner_kinds.json

Output: ``benchmarks/results/selection_sim_fit.json``: the measured figures, the difficulties a
logit-normal fits by maximum likelihood to the untrained success of every train task (pooled
over the seeds; reported, not used: see ``fit_dynamics``), and the dynamics grid (best first)
simulated on the same tuning seeds.
``python -m benchmarks.tune_learner_world [DATA]``.  Not timed; not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.common import machine, publish
from shopsimrl.simulate.calibrate_learner import (
    FITTED,
    LEARNER_2000,
    RANKED,
    SAMPLES,
    TUNING_SEEDS,
    fit_difficulties,
    fit_dynamics,
    learner_world,
    simulated_figures,
)

DATA = Path("benchmarks/results/selection_learner_kinds.json")


def measured(data: dict[str, Any]) -> dict[str, Any]:
    """The learner's figures the fit matches: the majority's share, and each kind's final success (medians)."""
    seeds = list(data["per_seed"])
    final = {}
    for selection, waves in FITTED:
        name = f"{selection}/{waves}"
        rows = [data["per_seed"][s][name] for s in seeds]
        final[name] = (median(r["goal_first"] for r in rows), median(r["goal_not_first"] for r in rows))
    untrained = [data["per_seed"][s]["untrained"] for s in seeds]
    share = {f"{sel}/{waves}": median(data["per_seed"][s][f"{sel}/{waves}"]["goal_first_share_of_trained_after_10"]
                                      for s in seeds) for sel, waves in FITTED}
    final_all = {name: median(data["per_seed"][s][name]["all"] for s in seeds) for name in final}
    return {"goal_first_share": data["goal_first_share"], "final": final, "final_all": final_all,
            "untrained": (median(r["goal_first"] for r in untrained), median(r["goal_not_first"] for r in untrained)),
            "goal_first_share_of_trained_after_10": share}


def figures_on_tuning_seeds() -> dict[str, dict[str, float]]:
    """``LEARNER_2000`` (the constants in the code) on the tuning seeds: every ranked config's figures."""
    return {f"{sel}/{waves}": simulated_figures(LEARNER_2000, sel, waves, TUNING_SEEDS) for sel, waves in RANKED}


def main(path: Path = DATA) -> dict[str, Any]:
    data = json.loads(path.read_text())
    seeds = list(data["per_seed"])
    tasks = data["goal_first"]
    pooled = {t: sum(data["per_seed"][s]["untrained"]["per_task"][t] for s in seeds) / len(seeds) for t in tasks}
    difficulties = fit_difficulties(pooled, tasks, SAMPLES * len(seeds))
    target = measured(data)
    base = learner_world(majority_share=target["goal_first_share"])
    rows = fit_dynamics(base, target, TUNING_SEEDS)
    best = rows[0]
    chosen = replace(base, **{k: v for k, v in best.items() if k != "loss"})
    results = {"machine": machine(), "tuning_seeds": list(TUNING_SEEDS), "data": str(path),
               "difficulties": difficulties, "measured": target, "chosen": chosen.as_dict(),
               "learner_2000_on_tuning_seeds": figures_on_tuning_seeds(), "grid": rows}
    publish("benchmarks/results/selection_sim_fit.json", results,
            {"difficulties": difficulties, "measured": target, "best": rows[:5]})
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, nargs="?", default=DATA)
    main(parser.parse_args().data)
