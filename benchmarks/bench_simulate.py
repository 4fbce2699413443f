"""The simulated training run: the four strategies on the world calibrated to the release run.

Medians over 5 simulation seeds of 80 steps (``shopsimrl simulate`` with the same
defaults), plus a sensitivity run on the world where training on a prompt does not
move that prompt more than any other (``eta_prompt = 0``, the best fit under that
constraint): the release data cannot tell the two apart, and the gain of prompt
selection depends on it.  Not timed: the figures are simulated.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from shopsimrl.io import atomic_write_json
from shopsimrl.simulate.compare import compare, targets
from shopsimrl.simulate.model import WorldParams

#: Best fit with eta_prompt fixed at 0 (grid of simulate/calibrate.py).
GLOBAL_ONLY = replace(WorldParams(), eta_prompt=0.0, skill_cap=5.0, episode_median_s=55.36)


def main(quick: bool = False) -> dict[str, object]:
    seeds = (0, 1) if quick else (0, 1, 2, 3, 4)
    results: dict[str, object] = {"steps": 80, "seeds": list(seeds)}
    for name, world in (("calibrated", WorldParams()), ("global_learning_only", GLOBAL_ONLY)):
        out = compare(steps=80, seeds=seeds, world=world)
        results[name] = {"world": out["world"], "summary": out["summary"], "targets": targets(out["summary"])}
    atomic_write_json("benchmarks/results/simulate.json", results)
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    main(quick=parser.parse_args().quick)
