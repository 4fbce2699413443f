"""The simulated training run: the configs on the world calibrated to the release run and GRESO's persistence.

Medians over simulation seeds 0-4 of 80 steps (``shopsimrl simulate`` with the same
defaults).  The selector's exploration horizon and the adaptive cushion were tuned on
seeds 100-104, never on these.  Three worlds:

- ``calibrated``: the joint fit (release figures + GRESO's persistence statistics),
  the simulator's default;
- ``per_prompt_1``: the best fit with training on a prompt raising its logit by 1.0,
  whose joint loss is within 0.002 of the chosen one (the data cannot separate them);
- ``release_only_fit``: the best fit to the release figures alone (+2.0 logits per
  prompt trained on), which the persistence statistics reject.

Not timed: the figures are simulated.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import command_line, publish
from shopsimrl.simulate.calibrate import FIT_SEEDS, PER_PROMPT_1, RELEASE_ONLY_FIT, persistence, seed_runs
from shopsimrl.simulate.model import WorldParams
from shopsimrl.simulate.side_by_side import compare

WORLDS = (("calibrated", WorldParams()), ("per_prompt_1", PER_PROMPT_1), ("release_only_fit", RELEASE_ONLY_FIT))


def targets(summary: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """The targets of the issue that set them, checked on the medians (value, met)."""
    seed, inf = summary.get("seed/fixed"), summary.get("skip/fixed")
    ada = summary.get("skip/adaptive")
    out: dict[str, dict[str, Any]] = {}
    if seed and inf:
        ratio = inf["informative_per_1k_generated_episodes"] / seed["informative_per_1k_generated_episodes"]
        out["fixed: informative per 1k vs seed >= 1.5x"] = {"value": ratio, "met": ratio >= 1.5}
        out["fixed: final pass rate >= seed's"] = {
            "value": inf["final_mean_pass_rate"] - seed["final_mean_pass_rate"],
            "met": inf["final_mean_pass_rate"] >= seed["final_mean_pass_rate"]}
        out["fixed: coverage >= 90%"] = {"value": inf["coverage"], "met": inf["coverage"] >= 0.9}
    if seed and ada:
        out["adaptive: generated per trained <= 1.25"] = {
            "value": ada["generated_per_trained_episode"], "met": ada["generated_per_trained_episode"] <= 1.25}
        out["adaptive: informative share of trained >= 90%"] = {
            "value": ada["informative_share_of_trained"], "met": ada["informative_share_of_trained"] >= 0.9}
        out["adaptive: final pass rate >= seed's"] = {
            "value": ada["final_mean_pass_rate"] - seed["final_mean_pass_rate"],
            "met": ada["final_mean_pass_rate"] >= seed["final_mean_pass_rate"]}
    return out


def main(quick: bool = False) -> dict[str, object]:
    seeds = (0, 1) if quick else (0, 1, 2, 3, 4)
    results: dict[str, object] = {"steps": 80, "seeds": list(seeds)}
    for name, world in WORLDS:
        out = compare(steps=80, seeds=seeds, world=world)
        results[name] = {"world": out["world"], "summary": out["summary"], "targets": targets(out["summary"]),
                         "persistence_seed_order": persistence(seed_runs(world, FIT_SEEDS)).as_dict()}
    publish("benchmarks/results/simulate.json", results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
