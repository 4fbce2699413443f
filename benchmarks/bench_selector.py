"""The spread rule's cost per chosen prompt (``SpreadSelector``, formerly the informative selector) at 100,000
prompts (target: <= 50 us), steady state.

Every prompt is observed first (most of them solved, as late in a run), then the
selector hands out waves of 32 and records each group; the figure is the median
over repeats of (time of next_prompts + record) / prompts chosen.  The same with
cluster labels (27, as many as ShopSim's categories), measured in the same run: each
pick then scans the buckets of every cluster.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone
from statistics import median

from benchmarks.common import command_line, machine, publish
from shopsimrl.sampling.spread import SpreadSelector


def bench(prompts: int, waves: int, repeats: int, solved_share: float = 0.8, clusters: int = 0) -> dict[str, float]:
    ids = [f"task-{i:06d}" for i in range(prompts)]
    rng = random.Random(0)
    solved = {p for p in ids if rng.random() < solved_share}
    labels = {pid: i % clusters for i, pid in enumerate(ids)} if clusters else None
    sel = SpreadSelector(ids, 8, seed=0, clusters=labels)
    for pid in sel.next_prompts(prompts):  # every prompt observed once
        sel.record(pid, [1.0] * 8 if pid in solved else [1.0, 0.0] * 4)
    sel.pop_stats()
    per_prompt = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        chosen = 0
        for _ in range(waves):
            batch = sel.next_prompts(32)
            chosen += len(batch)
            for pid in batch:
                sel.record(pid, [1.0] * 8 if pid in solved else [1.0, 0.0] * 4)
        per_prompt.append((time.perf_counter() - t0) / chosen * 1e6)
    stats = sel.pop_stats()
    return {"prompts": prompts, "clusters": clusters, "us_per_chosen_prompt_median": median(per_prompt),
            "prompts_waiting_for_a_recheck": stats["skipped"], "solved_share": solved_share}


def main(quick: bool = False) -> dict[str, object]:
    result = bench(100_000, waves=50 if quick else 200, repeats=3 if quick else 7)
    labelled = bench(100_000, waves=50 if quick else 200, repeats=3 if quick else 7, clusters=27)
    results = {
        "machine": machine(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "selector_100k": result,
        "selector_100k_27_clusters": labelled,
        "target_us_per_chosen_prompt": 50.0,
        "meets_target": result["us_per_chosen_prompt_median"] <= 50.0,
    }
    publish("benchmarks/results/selector.json", results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
