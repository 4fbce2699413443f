"""Prompt selection judged by the policy it trains: the main job with the GRPO learner, held-out eval.

Each strategy runs ``shopsimrl rollout --learner grpo --eval-every 5`` on the same seeds
in a regime of several epochs (``--products 2000``: 160 train tasks, a step starts at
least 32 of them, so 30 steps walk the train split about six times), and is judged on
the val split by the learned policy's sampled eval success, at equal generated
episodes (the cost of a rollout), not at equal steps:

- final eval success and the generated episodes it cost; the episodes it took to first
  reach that success;
- eval success at the largest number of generated episodes every run reached (each
  run's curve interpolated linearly between its evaluations);
- the efficiency figures of the previous version of this benchmark (informative groups
  trained per 1,000 generated episodes, generated per trained episode) and the rollout
  success rate of the last five steps, which measures the prompts chosen, not the policy.

Medians over seeds.  Not timed.  Reproduce: ``python -m benchmarks.bench_selection``.
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
from shopsimrl.learn.compare import read_run

STRATEGIES: dict[str, list[str]] = {
    "seed/fixed": ["--selection", "seed", "--waves", "fixed"],
    "informative/fixed": ["--selection", "informative", "--waves", "fixed"],
    "informative/adaptive": ["--selection", "informative", "--waves", "adaptive"],
}
PREFIX = "rollout/shopsim/"
PRODUCTS, EVAL_EVERY, EVAL_SAMPLES = 2000, 5, 8


def figures(run: Path) -> dict[str, float]:
    """The run's eval and efficiency figures from its per-step metrics."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line]

    def total(key: str) -> float:
        return sum(row[PREFIX + key] for row in rows)

    episodes = total("waste/episodes_submitted")
    kept = total("waste/groups_kept")
    informative = kept - total("step/fallback_group_count")
    curve = read_run(run)
    first, last = curve.points[0], curve.points[-1]
    return {
        "first_eval_success": first.success,
        "final_eval_success": last.success,
        "final_eval_greedy_success": last.greedy,
        "generated_episodes": last.generated,
        "episodes_to_reach_final_success": curve.episodes_to_reach(last.success),
        "informative_per_1k_generated_episodes": 1000.0 * informative / episodes,
        "generated_per_trained_episode": episodes / total("waste/episodes_kept"),
        "rollout_success_rate_last_5_steps": sum(row[PREFIX + "success_rate"] for row in rows[-5:]) / 5,
        "_curve": [(p.generated, p.success) for p in curve.points],  # type: ignore[dict-item]
    }


def success_at(curve: list[tuple[float, float]], episodes: float) -> float:
    """Eval success at ``episodes`` generated, linear between evaluations."""
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x0 <= episodes <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (episodes - x0) / (x1 - x0)
    return curve[-1][1]


def main(quick: bool = False) -> dict[str, object]:
    steps, seeds = (10, (0,)) if quick else (30, (0, 1, 2))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in STRATEGIES}
    with tempfile.TemporaryDirectory(prefix="shopsimrl-bench-selection-") as out:
        for seed in seeds:
            for name, flags in STRATEGIES.items():
                run_name = f"{name.replace('/', '-')}-{seed}"
                argv = ["rollout", "--learner", "grpo", "--eval-every", str(EVAL_EVERY), "--eval-samples",
                        str(EVAL_SAMPLES), "--products", str(PRODUCTS), "--steps", str(steps), "--seed", str(seed),
                        "--out", out, "--name", run_name, "--no-timeline", "--view", "plain", *flags]
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    code = cli_main(argv)
                if code != 0:
                    raise RuntimeError(f"shopsimrl {' '.join(argv)} exited with {code}")
                runs[name].append(figures(Path(out) / run_name))
                print(f"{run_name}: {runs[name][-1]}", flush=True)
    common = min(run["generated_episodes"] for group in runs.values() for run in group)
    for group in runs.values():
        for run in group:
            run["eval_success_at_common_episodes"] = success_at(run.pop("_curve"), common)  # type: ignore[arg-type]
    summary = {name: {key: median(run[key] for run in group if run[key] is not None) for key in group[0]}
               for name, group in runs.items()}
    results = {
        "machine": machine(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "products": PRODUCTS,
        "steps": steps,
        "seeds": list(seeds),
        "eval": {"every": EVAL_EVERY, "samples_per_task": EVAL_SAMPLES, "split": "val"},
        "common_generated_episodes": common,
        "summary": summary,
        "runs": runs,
    }
    publish("benchmarks/results/selection.json", results, summary)
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
