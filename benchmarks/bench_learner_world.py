"""The simulator's ``learner`` world on the report seeds: does it rank the configs as the GRPO learner does?

``shopsimrl simulate --world learner`` (``calibrate_learner.LEARNER_2000``: 160 prompts of two
kinds that disagree about what to learn, fitted to the learner on the tuning seeds 100-104)
runs the five configs 30 steps on seeds 0-4, and its ranking on final mean pass rate is
checked against the learner's ranking on held-out success
(``calibrate_learner.LEARNER_FINAL_BY_SEED``, from ``benchmarks/results/selection.json``).
Also, not fitted, what the world says about a pool ten times larger (1,600 prompts): the
issue's learner measured a smaller harm there.  The ``calibrated`` world (every group teaches
every prompt alike) is shown beside it: it cannot rank the rules, since there concentration
costs nothing.

Medians over the seeds.  Not timed: the figures are simulated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from benchmarks.common import command_line, machine, publish
from shopsimrl.simulate.calibrate_learner import LEARNER_2000, LEARNER_FINAL_BY_SEED, RANKED, rank_agrees
from shopsimrl.simulate.model import WorldParams
from shopsimrl.simulate.side_by_side import compare

STEPS = 30
REPORT_SEEDS = (0, 1, 2, 3, 4)


def learner_targets(summary: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    """The simulator's ranking of the five configs on final pass rate against the learner's on held-out success."""
    labels = [f"{sel}/{waves}" for sel, waves in RANKED]
    if not all(label in summary for label in labels):
        return {}
    simulated = {label: summary[label]["final_mean_pass_rate"] for label in labels}
    verdict = rank_agrees(simulated, LEARNER_FINAL_BY_SEED)
    return {"learner world: ranks the configs as the learner does (separated pairs in another order)": {
        "value": float(len(verdict["disagreements"])), "met": verdict["agrees"],
        "disagreements": verdict["disagreements"], "pairs": verdict["pairs"],
        "strict_order_agrees": verdict["strict_agrees"]}}


def main(quick: bool = False) -> dict[str, object]:
    seeds = (0, 1) if quick else REPORT_SEEDS
    worlds = {"learner": LEARNER_2000, "learner_1600_prompts": replace(LEARNER_2000, prompts=1600),
              "calibrated_160_prompts": replace(WorldParams(), prompts=160)}
    results: dict[str, object] = {"machine": machine(), "steps": STEPS, "seeds": list(seeds),
                                  "learner_final_by_seed": LEARNER_FINAL_BY_SEED}
    for name, world in worlds.items():
        out = compare(steps=STEPS, seeds=seeds, world=world, configs=RANKED)
        summary = out["summary"]
        results[name] = {"world": out["world"], "summary": summary, "targets": learner_targets(summary),
                         "final_vs_seed": {k: v["final_mean_pass_rate"] - summary["seed/fixed"]["final_mean_pass_rate"]
                                           for k, v in summary.items()}}
    publish("benchmarks/results/selection_sim.json", results,
            {name: results[name]["final_vs_seed"] for name in worlds})  # type: ignore[index]
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
