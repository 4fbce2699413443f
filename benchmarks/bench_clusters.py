"""Clustered simulated worlds: does informative selection (told the clusters) stay safe where learning stays inside?

``shopsimrl simulate --clusters K --transfer S`` for K in {10, 50} and S in {0, 0.3}
(the targets), and S = 1 (learning fully shared: what telling the selector the
clusters costs where they do not matter).  Medians over simulation seeds 0-2 of 80
steps, every config side by side on the same worlds, plus skip/adaptive not
told the clusters (the selector before labels).  The cluster constants
(``CLUSTER_DRIFT``, ``CLUSTER_TIE_LOGITS``) were chosen on seeds 100-104, never on
these.  Not timed: the figures are simulated and deterministic.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import command_line, publish
from shopsimrl.simulate.model import WorldParams
from shopsimrl.simulate.side_by_side import compare

WORLDS = ((10, 0.3), (50, 0.3), (10, 0.0), (50, 0.0), (10, 1.0), (50, 1.0))


def cluster_targets(summary: dict[str, dict[str, float]], clusters: int) -> dict[str, dict[str, Any]]:
    """The targets of clustered worlds, on the medians: skip/adaptive against seed/fixed."""
    seed, ada = summary.get("seed/fixed"), summary.get("skip/adaptive")
    if not (seed and ada):
        return {}
    ratio = ada["informative_per_1k_generated_episodes"] / seed["informative_per_1k_generated_episodes"]
    return {
        "clusters: adaptive final pass rate >= seed/fixed's": {
            "value": ada["final_mean_pass_rate"] - seed["final_mean_pass_rate"],
            "met": ada["final_mean_pass_rate"] >= seed["final_mean_pass_rate"]},
        "clusters: adaptive informative per 1k >= 2x seed/fixed's": {"value": ratio, "met": ratio >= 2.0},
        "clusters: every cluster generated (adaptive, every seed)": {
            "value": ada["clusters_generated_min"], "met": ada["clusters_generated_min"] >= clusters},
    }


def main(quick: bool = False) -> dict[str, object]:
    seeds = (0,) if quick else (0, 1, 2)
    steps = 30 if quick else 80
    results: dict[str, object] = {"steps": steps, "seeds": list(seeds)}
    for k, s in WORLDS:
        world = WorldParams(clusters=k, transfer=s)
        out = compare(steps=steps, seeds=seeds, world=world)
        results[f"K={k},S={s:g}"] = {"world": out["world"], "summary": out["summary"],
                                     "targets": cluster_targets(out["summary"], k)}
    publish("benchmarks/results/simulate_clusters.json", results,
            shown={name: {label: round(row["final_mean_pass_rate"], 3) for label, row in v["summary"].items()}
                   for name, v in results.items() if isinstance(v, dict)})
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
