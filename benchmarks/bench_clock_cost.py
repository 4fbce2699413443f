"""What the modelled clock costs in machine time: the same runs on both clocks, side by side.

The modelled clock never sleeps, but it plays every group a step starts to its end (the machine's
clock cancels the aborted ones mid-episode).  Each config runs ``STEPS`` steps of the main job
(``--products 2000``, heuristic policy, ``--learner grpo``) on each clock, alternating, ``REPEATS`` times;
the result is the median machine seconds per clock and their ratio, with the groups aborted per step.
``python -m benchmarks.bench_clock_cost`` writes ``benchmarks/results/clock_cost.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

from benchmarks.common import command_line, machine, publish

CONFIGURATIONS = (("seed", "fixed"), ("skip", "adaptive"))
STEPS = 10
REPEATS = 3


def timed(argv: list[str]) -> float:
    code = f"import sys; from shopsimrl.cli import main; sys.exit(main({argv!r}))"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(quick: bool = False) -> dict:
    steps, repeats = (3, 1) if quick else (STEPS, REPEATS)
    results: dict = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "steps": steps,
                     "repeats": repeats, "configs": {}}
    with tempfile.TemporaryDirectory(prefix="shopsimrl-bench-clock-cost-") as tmp:
        for selection, waves in CONFIGURATIONS:
            seconds: dict[str, list[float]] = {"machine": [], "modelled": []}
            aborted: dict[str, float] = {}
            for k in range(repeats):
                for clock in ("machine", "modelled"):
                    name = f"{selection}-{waves}-{clock}-{k}"
                    seconds[clock].append(timed(["rollout", "--products", "2000", "--learner", "grpo", "--steps",
                                                 str(steps), "--selection", selection, "--waves", waves, "--clock",
                                                 clock, "--out", tmp, "--name", name, "--no-timeline", "--view",
                                                 "plain"]))
                    rows = [json.loads(x) for x in (Path(tmp) / name / "metrics.jsonl").read_text().splitlines()]
                    aborted[clock] = sum(r["rollout/shopsim/waste/groups_aborted"] for r in rows) / len(rows)
            results["configs"][f"{selection}/{waves}"] = {
                "machine_s": {c: median(v) for c, v in seconds.items()}, "runs_s": seconds,
                "modelled_over_machine": median(seconds["modelled"]) / median(seconds["machine"]),
                "aborted_groups_per_step": aborted}
    publish("benchmarks/results/clock_cost_quick.json" if quick else "benchmarks/results/clock_cost.json", results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
