"""Prompt selection on the real main job: the embedded ShopSim default with the heuristic policy's ``--learning``.

The simulator (``bench_simulate``) measures the strategies on a world fitted to the
release run.  This one runs ``shopsimrl rollout --learning`` itself (the in-process
env, the real driver, controller and selector) for each strategy, on the same seeds,
and reads the figures back from each run's ``metrics.jsonl``:

- informative groups trained per 1,000 generated episodes (kept minus fallback,
  over every submitted episode, aborted ones included);
- generated episodes per trained episode; the informative share of the trained groups;
- the zero-spread drop rate of the last five steps.

Medians over seeds.  The heuristic's learning mode makes each task it trains on with
spread more deterministic (docs/efficient-sampling.md), a per-task effect, so this is
the simulator's per-prompt sensitivity case on the real path.  Not timed.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

from benchmarks.common import command_line, machine, publish
from shopsimrl.cli import main as cli_main

STRATEGIES: dict[str, list[str]] = {
    "seed/fixed": ["--selection", "seed", "--waves", "fixed"],
    "informative/fixed": ["--selection", "informative", "--waves", "fixed"],
    "informative/adaptive": ["--selection", "informative", "--waves", "adaptive"],
    "informative/adaptive, cushion 0": ["--selection", "informative", "--waves", "adaptive", "--cushion", "0"],
}
PREFIX = "rollout/shopsim/"


def figures(run: Path) -> dict[str, float]:
    """The run's efficiency figures from its per-step metrics."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line]

    def total(key: str) -> float:
        return sum(row[PREFIX + key] for row in rows)

    episodes = total("waste/episodes_submitted")
    kept = total("waste/groups_kept")
    informative = kept - total("step/fallback_group_count")
    episodes_kept = total("waste/episodes_kept")
    last = rows[-5:]
    return {
        "informative_per_1k_generated_episodes": 1000.0 * informative / episodes,
        "generated_per_trained_episode": episodes / episodes_kept,
        "informative_share_of_trained": informative / kept,
        "zero_std_drop_rate_last_5_steps": sum(row[PREFIX + "zero_std_group_drop_rate"] for row in last) / len(last),
    }


def main(quick: bool = False) -> dict[str, object]:
    steps, seeds = (6, (0,)) if quick else (20, (0, 1, 2))
    per_strategy: dict[str, list[dict[str, float]]] = {name: [] for name in STRATEGIES}
    with tempfile.TemporaryDirectory(prefix="shopsimrl-bench-selection-") as out:
        for seed in seeds:
            for name, flags in STRATEGIES.items():
                run_name = f"{name.replace('/', '-').replace(', ', '-').replace(' ', '')}-{seed}"
                argv = ["rollout", "--learning", "--steps", str(steps), "--seed", str(seed), "--out", out,
                        "--name", run_name, "--no-timeline", *flags]
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    code = cli_main(argv)
                if code != 0:
                    raise RuntimeError(f"shopsimrl {' '.join(argv)} exited with {code}")
                per_strategy[name].append(figures(Path(out) / run_name))
    summary = {name: {key: median(run[key] for run in runs) for key in runs[0]} for name, runs in per_strategy.items()}
    results = {
        "machine": machine(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "steps": steps,
        "seeds": list(seeds),
        "summary": summary,
        "runs": per_strategy,
    }
    publish("benchmarks/results/selection.json", results, summary)
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
