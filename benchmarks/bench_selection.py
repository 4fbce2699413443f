"""Prompt selection judged by the policy it trains: the main job with the GRPO learner, held-out success paired by seed.

Two regimes, each config a real ``shopsimrl rollout --learner grpo --eval-every 5`` run:

- ``products_2000`` (``--products 2000``: 160 train tasks, a step starts at least 32 of
  them, so 30 steps walk the train split about six times): seed/fixed, spread/fixed,
  spread/adaptive, skip/fixed, skip/adaptive, and beside them skip/adaptive
  with staged siblings (``--siblings staged``), on seeds 0-14, judged on val+test
  (40 tasks) with 16 sampled episodes per task;
- ``default_catalog`` (the embedded default, 1,600 train tasks: 30 steps are under one
  epoch): seed/fixed against skip/adaptive on seeds 0-8, judged on the 200 val tasks
  with 4 sampled episodes per task (800 episodes per evaluation).

**One budget of generated episodes.**  seed/fixed runs ``steps`` (30) steps, every one a whole wave:
``steps × 32 × 8`` = 7,680 generated episodes, the budget.  A config with adaptive waves spends fewer
per step, so it runs more steps (up to ``max_steps``) and is judged on the steps within that budget: its
figures count the steps whose generated episodes stay within it, and its curve goes up to its first
evaluation at or past it (so its success at 7,680 episodes is interpolated, never extrapolated).  The most
trainings of one prompt are counted in the first ``steps`` steps (the issue's "in 30 steps"), and beside
that within the budget.

Every config is compared with seed/fixed **of the same seed** (the same catalog, the same eval
episodes): per-seed differences, their median, and their mean with a 95% bootstrap interval over the
seeds (``interval``: a difference whose interval leaves out zero is separated from the runs' noise).
Each seed is one independent pair: a seed's shuffles, evaluation episodes and, with fixed waves, nearly
its whole run are the same on every repetition, so ``--repeats`` measures timing noise, not more pairs.
At equal generated episodes (each run's sampled eval success interpolated linearly between its
evaluations, at seed/fixed's evaluations from 2,500 episodes on and at the largest number both runs
reached) and at equal rollout cost, measured two ways: env steps generated (every episode's tool calls,
which the runtime counts deterministically: on one machine the rollout's work is proportional to them)
and the measured step wall seconds (``rollout/shopsim/step/wall_seconds``, noisy on a shared machine).
Also: informative groups per 1,000 generated episodes, generated episodes to reach seed/fixed's final
held-out success, and concentration (the most trainings of one prompt, the 10 most-trained prompts'
share of trained groups, distinct prompts trained, and distinct prompts among the last ``len(train)``
starts), computed from each run's ``batch.jsonl`` and ``events.jsonl``.  The issue's targets are checked
in a ``targets`` block.

The same judge on the modelled GPU clock, with slime's two loops, counts the bill: ``bench_selection_clock.py``
(``Regime.clock``, the ``+async`` configs and the ``model_s`` axis are its).

Two runs at a time (subprocesses).  ``--quick``: one seed, 10 steps, ``products_2000`` only.
``--seeds``/``--only``/``--keep DIR`` serve tuning and the mechanism's diagnosis
(``python -m benchmarks.diagnose_selection DIR``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from benchmarks.common import machine, publish
from shopsimrl.defaults import DEFAULT_N_SAMPLES_PER_PROMPT, DEFAULT_OVER_SAMPLING_BATCH_SIZE

PREFIX = "rollout/shopsim/"
EVAL = "eval/shopsim/"
SEED_FIXED = "seed/fixed"
#: Measured beside the issue's configs, with the same targets: the skip rule with adaptive waves and staged
#: siblings (the lever that raises informative groups per generated episode past the skip's).
STAGED_BESIDE = "skip/adaptive/staged"
#: Evaluations before this many generated episodes are not compared (every config starts alike).
COMPARE_FROM_EPISODES = 2500.0
JOBS = 2  # runs at a time
#: A config run under slime's train_async.py ends in this (``skip/adaptive+async``); without it, train.py.
ASYNC = "+async"
#: After ``+async``: truncated importance sampling on the policy lag (``--tis-cap``), capped at slime's ``--tis-clip``
#: default (``forecast/fixed+async+tis``).
TIS = "+tis"
TIS_CAP = 2.0
#: Last: the ``forecast`` rule also reads a difficulty label (``--prompt-labels``), each task's share of zero-spread
#: groups on seed/fixed runs of the tuning seeds (:func:`labels_file`, ``shopsimrl data export --zero-spread-from``).
LABELS = "+labels"
#: The modelled clock's wall time so far (``--clock modelled``): the curve's ``model_s`` axis.
MODEL_TOTAL = PREFIX + "clock/total_s"


def loop_of(config: str) -> tuple[str, str]:
    """(``selection/waves[/staged]``, ``sync`` or ``async``) of a config name (``+tis`` is the async loop's option)."""
    config = config.removesuffix(LABELS)
    base = config.removesuffix(TIS)
    if base != config and not base.endswith(ASYNC):
        raise ValueError(f"{config}: {TIS} corrects the async loop's policy lag, so it follows {ASYNC}")
    return (base.removesuffix(ASYNC), "async") if base.endswith(ASYNC) else (base, "sync")


@dataclass(frozen=True)
class Regime:
    """One catalog and how its runs are judged."""

    name: str
    products: int | None  # None: the embedded default catalog
    configs: tuple[str, ...]
    seeds: tuple[int, ...]
    eval_split: str
    eval_samples: int
    steps: int = 30
    eval_every: int = 5
    repeats: int = 1  # runs per (config, seed): each repetition is paired with seed/fixed's of the same number
    max_steps: int = 60  # the most steps a config with adaptive waves runs to spend the budget
    clock: str = "machine"  # modelled: every run on the modelled GPU clock (bench_selection_clock.py)

    @property
    def budget(self) -> float:
        """Generated episodes every config may spend: seed/fixed's ``steps`` whole waves."""
        return float(self.steps * DEFAULT_OVER_SAMPLING_BATCH_SIZE * DEFAULT_N_SAMPLES_PER_PROMPT)

    def steps_of(self, config: str) -> int:
        """Steps run: ``steps`` with whole waves (they spend the budget exactly), else ``max_steps``."""
        return self.max_steps if loop_of(config)[0].split("/")[1] == "adaptive" else self.steps


#: The release run's regime (the default catalog for its 80 steps, about 1.6 epoch passes), where the informative
#: rule has little to skip: seed/fixed against the ``forecast`` rule that skips never-seen prompts forecast from their
#: text and labels (``FORECAST``), alone and with staged siblings (a pilot before committing).  Evaluated every 10 steps (8 evaluations; the budget is 20,480
#: episodes); adaptive waves run at most 100 steps.
FORECAST = "forecast/adaptive"
FORECAST_STAGED = "forecast/adaptive/staged"  # with a pilot of half the siblings before committing the rest
RELEASE = Regime("release", None, ("seed/fixed", FORECAST, FORECAST_STAGED), tuple(range(5)), "val", 4, steps=80,
                 eval_every=10, max_steps=100)
#: The ``forecast`` rule's targets: (regime, most episodes to reach seed/fixed's final, least informative ratio).
FORECAST_TARGETS = {"release": (0.65, 1.35), "products_2000": (0.6, None)}
REGIMES = (
    Regime("products_2000", 2000, ("seed/fixed", "spread/fixed", "spread/adaptive", "skip/fixed",
                                   "skip/adaptive", "skip/adaptive/staged", FORECAST), tuple(range(15)),
           "val+test", 16),
    Regime("default_catalog", None, ("seed/fixed", "skip/adaptive"), tuple(range(9)), "val", 4),
    RELEASE,
)
QUICK = Regime("products_2000", 2000, REGIMES[0].configs, (0,), "val+test", 16, steps=10, max_steps=16)


def labels_file(regime: Regime) -> Path:
    """The reference labels of ``regime``'s catalog (``release`` and ``release_clock`` share the default's)."""
    return Path(__file__).parent / "results" / f"reference_labels_{regime.name.removesuffix('_clock')}.jsonl"


def run_argv(regime: Regime, config: str, seed: int, out: Path, name: str) -> list[str]:
    """``selection/waves`` or ``selection/waves/staged`` (staged siblings, the default stage size)."""
    base, loop = loop_of(config)
    selection, waves, *siblings = base.split("/")
    clock = ["--clock", regime.clock] + (["--loop", loop] if loop != "sync" else []) if regime.clock != "machine" else []
    return ["rollout", *(["--siblings", *siblings] if siblings else []), *clock, "--learner", "grpo",
            "--eval-every", str(regime.eval_every), "--eval-samples", str(regime.eval_samples),
            "--eval-split", regime.eval_split, "--steps", str(regime.steps_of(config)), "--seed", str(seed),
            "--selection", selection, "--waves", waves, "--out", str(out), "--name", name,
            *(["--tis-cap", str(TIS_CAP)] if config.removesuffix(LABELS).endswith(TIS) else []),
            *(["--prompt-labels", str(labels_file(regime))] if config.endswith(LABELS) else []),
            "--no-timeline", "--view", "plain", *(["--products", str(regime.products)] if regime.products else [])]


def run_one(argv: list[str], log: Path) -> None:
    """``shopsimrl ARGV`` in a child process at a lower priority (its output into ``log``)."""
    code = f"import sys; from shopsimrl.cli import main; sys.exit(main({argv!r}))"
    with log.open("w") as out:
        done = subprocess.run(["nice", "-n", "5", sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
                              check=False)
    if done.returncode != 0:
        raise RuntimeError(f"shopsimrl {' '.join(argv)} exited with {done.returncode} (log: {log})")


# -- one run's figures --------------------------------------------------------------------------------------------

def read_rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line]


def curve(rows: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """Each evaluation: the success of its parameters and what the steps they were trained on cost."""
    spent = {0: (0.0, 0.0, 0.0)}
    model = {0: 0.0} if any(MODEL_TOTAL in row for row in rows) else {}  # the modelled wall time after each step
    for row in rows:
        e, s, w = spent[int(row["step"]) - 1]
        spent[int(row["step"])] = (e + row[PREFIX + "waste/episodes_submitted"],
                                   s + row[PREFIX + "waste/env_steps_submitted"],
                                   w + row[PREFIX + "step/wall_seconds"])
        if MODEL_TOTAL in row:
            model[int(row["step"])] = row[MODEL_TOTAL]
    points = []
    for row in rows:
        if EVAL + "trained_steps" in row and EVAL + "success_rate" in row:
            trained = int(row[EVAL + "trained_steps"])
            e, s, w = spent[trained]
            points.append({"trained_steps": trained, "episodes": e, "env_steps": s, "wall_s": w,
                           **({"model_s": model[trained]} if trained in model else {}),
                           "success": row[EVAL + "success_rate"], "greedy": row.get(EVAL + "greedy/success_rate")})
    return sorted(points, key=lambda p: p["trained_steps"])


def at(points: Sequence[dict[str, float]], x: float, axis: str = "episodes") -> float | None:
    """Sampled eval success at ``x`` on ``axis``, linear between evaluations; ``None`` beyond the last one."""
    for p0, p1 in zip(points, points[1:]):
        x0, x1 = p0[axis], p1[axis]
        if x0 <= x <= x1:
            return p0["success"] if x1 == x0 else p0["success"] + (p1["success"] - p0["success"]) * (x - x0) / (x1 - x0)
    return points[-1]["success"] if points and x == points[-1][axis] else None


def to_reach(points: Sequence[dict[str, float]], success: float, axis: str = "episodes") -> float | None:
    """The cost (on ``axis``) at which the curve first reaches ``success`` (linear between evaluations)."""
    for p0, p1 in zip(points, points[1:]):
        if p0["success"] >= success:
            return p0[axis]
        if p1["success"] >= success:
            return p0[axis] + (p1[axis] - p0[axis]) * (success - p0["success"]) / (p1["success"] - p0["success"])
    return points[-1][axis] if points and points[-1]["success"] >= success else None


def step_of(folder: Path) -> int:
    return int(folder.name.split("-")[1])


def trained_groups(run: Path) -> list[tuple[int, str]]:
    """(step, task) of every group the trainer got, from each step's ``batch.jsonl``."""
    groups: set[tuple[int, int, str]] = set()
    for batch in run.glob("step-*/batch.jsonl"):
        for line in batch.read_text().splitlines():
            if line:
                row = json.loads(line)
                groups.add((int(row["step"]), int(row["group_index"]), str(row["task_id"])))
    return [(step, task) for step, _index, task in sorted(groups)]


def starts(run: Path, last_step: int | None = None) -> list[str]:
    """Every task started, in order (the waves and refills of ``events.jsonl``, step by step, up to ``last_step``)."""
    out: list[str] = []
    steps = sorted(run.glob("step-*/events.jsonl"), key=lambda p: step_of(p.parent))
    for events in steps:
        if last_step is not None and step_of(events.parent) > last_step:
            break
        for line in events.read_text().splitlines():
            event = json.loads(line) if line else {}
            if event.get("event") == "wave":
                out += event["task_ids"]
    return out


def spread_calibration(run: Path, rows: Sequence[dict[str, Any]], last_step: int | None = None) -> dict[str, float]:
    """Why adaptive waves save little or much: the share of decided groups that had spread, against the mean
    chance of spread the selector predicted for the prompts it handed out (step by step, then averaged).  A
    sizer fills a batch of 16 from a budget of 32 groups only when that share is at least one half."""
    varied = decided = 0
    for events in run.glob("step-*/events.jsonl"):
        if last_step is not None and step_of(events.parent) > last_step:
            continue
        for line in events.read_text().splitlines():
            event = json.loads(line) if line else {}
            if event.get("event") == "decision":
                decided += 1
                varied += event["verdict"] == "varied"
    predicted = [1.0 - row[PREFIX + "selector/predicted_zero_spread_mean"] for row in rows
                 if PREFIX + "selector/predicted_zero_spread_mean" in row]
    return {"spread_share_of_decided": varied / decided if decided else 0.0,
            **({"predicted_spread_mean": sum(predicted) / len(predicted)} if predicted else {})}


def most_trainings(groups: Sequence[tuple[int, str]]) -> list[int]:
    """Trainings per prompt, most first."""
    return sorted(Counter(task for _step, task in groups).values(), reverse=True)


def concentration(run: Path, train_tasks: int, steps: int | None = None, last_step: int | None = None) -> dict[str, float]:
    """How the trained groups spread over the prompts (the issue's concentration figures): the most trainings of
    one prompt in the first ``steps`` steps (the issue's count), the rest over the steps up to ``last_step``."""
    groups = trained_groups(run)  # read once; each figure keeps its steps
    ranked = most_trainings([g for g in groups if last_step is None or g[0] <= last_step])
    first = most_trainings([g for g in groups if g[0] <= steps]) if steps is not None else ranked
    window = starts(run, last_step)[-train_tasks:]
    return {"max_trainings_per_prompt": float(first[0]), "max_trainings_within_budget": float(ranked[0]),
            "top10_share": sum(ranked[:10]) / sum(ranked), "distinct_prompts_trained": float(len(ranked)),
            "distinct_per_train_size_starts_last": float(len(set(window))), "starts_window": float(len(window))}


def forecast_calibration(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The ``forecast`` rule's calibration over the steps (its groups of rarely-seen prompts): mean predicted and
    observed zero-spread rate, its Brier score and the base rate's, weighted by each step's groups; ``{}`` without it."""
    key = PREFIX + "selector/forecast/"
    groups = sum(row.get(key + "groups", 0.0) for row in rows)
    if not groups:
        return {}
    means = ("predicted_zero_spread", "observed_zero_spread", "brier", "base_brier")
    return {"forecast_groups": groups, "forecast_skipped": sum(row.get(key + "skipped", 0.0) for row in rows),
            **{f"forecast_{m}": sum(row.get(key + "groups", 0.0) * row.get(key + m, 0.0) for row in rows) / groups
               for m in means}}


def within(rows: Sequence[dict[str, Any]], budget: float) -> list[dict[str, Any]]:
    """The rows of the steps whose generated episodes, summed from the first step, stay within ``budget``."""
    spent, kept = 0.0, []
    for row in rows:
        spent += row[PREFIX + "waste/episodes_submitted"]
        if spent > budget and kept:
            break
        kept.append(row)
    return kept


def figures(run: Path, budget: float | None = None, steps: int | None = None) -> dict[str, Any]:
    """One run's figures; with ``budget``, over the steps within that many generated episodes (the curve up to
    its first evaluation at or past it); the most trainings of one prompt over the first ``steps`` steps."""
    every = read_rows(run)
    rows = within(every, budget) if budget is not None else every
    config = json.loads((run / "run.json").read_text())

    def total(key: str) -> float:
        return float(sum(row[PREFIX + key] for row in rows))

    episodes = total("waste/episodes_submitted")
    informative = total("waste/groups_kept") - total("step/fallback_group_count")
    points = curve(every)
    if budget is not None:
        past = next((j for j, p in enumerate(points) if p["episodes"] >= budget), len(points) - 1)
        points = points[:past + 1]
    last_step = int(rows[-1]["step"])
    final = at(points, budget) if budget is not None and points[-1]["episodes"] > budget else None
    train_tasks = int(config.get("train_tasks") or 0) or len({t for _s, t in trained_groups(run)})
    emitted = {k.removeprefix(PREFIX + "concentration/"): v for k, v in rows[-1].items()
               if k.startswith(PREFIX + "concentration/")}
    return {
        "first_eval_success": points[0]["success"],
        "final_eval_success": points[-1]["success"] if final is None else final,
        "steps_within_budget": float(last_step),
        "final_eval_greedy_success": points[-1 if final is None else -2]["greedy"],  # the last within the budget
        "generated_episodes": episodes,
        "env_steps": total("waste/env_steps_submitted"),
        "rollout_wall_s": total("step/wall_seconds"),
        "informative_groups": informative,
        "informative_per_1k_generated_episodes": 1000.0 * informative / episodes,
        "generated_per_trained_episode": episodes / total("waste/episodes_kept"),
        "rollout_success_rate_last_5_steps": sum(row[PREFIX + "success_rate"] for row in rows[-5:]) / 5,
        **concentration(run, train_tasks, steps, last_step),
        **spread_calibration(run, rows, last_step),
        **forecast_calibration(rows),
        **({"emitted_concentration_last_step": emitted} if emitted else {}),
        "curve": points,
    }


# -- pairing by seed ----------------------------------------------------------------------------------------------

def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return median(kept) if kept else None


#: Resamples behind each interval of the paired bootstrap, and its generator's seed (one set of runs, one interval).
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
#: The interval's coverage: a difference is separated from the runs' noise when its interval leaves out zero.
INTERVAL_LEVEL = 0.95


def seed_of(key: str | int) -> str:
    """The seed of a run key (``run_key``): repetitions of one seed share it."""
    return str(key).split("r", 1)[0]


def interval(diffs: Mapping[str, float | None]) -> dict[str, float] | None:
    """The mean of the per-seed differences and its percentile bootstrap interval (``INTERVAL_LEVEL``).

    The unit is the seed: repetitions of one seed (``<seed>r<k>``) share its shuffles, its evaluation episodes and,
    for the configs whose picks do not depend on timing, most of their run, so they are averaged into one
    difference before the seeds are resampled.  Also how many seeds are above and below zero.  ``None`` with fewer
    than two seeds.
    """
    by_seed: dict[str, list[float]] = {}
    for key, value in diffs.items():
        if value is not None:
            by_seed.setdefault(seed_of(key), []).append(value)
    values = np.array([sum(v) / len(v) for v in by_seed.values()])
    if len(values) < 2:
        return None
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = values[rng.integers(0, len(values), (BOOTSTRAP_RESAMPLES, len(values)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - INTERVAL_LEVEL) / 2, (1 + INTERVAL_LEVEL) / 2])
    return {"mean": float(values.mean()), "low": float(low), "high": float(high), "seeds": len(values),
            "above": int((values > 0).sum()), "below": int((values < 0).sum())}


AXES = ("episodes", "env_steps", "wall_s")  # generated episodes; env steps (deterministic); measured wall seconds
MODEL_AXIS = "model_s"  # the modelled wall time (rollout, training, weight sync): the runs on the modelled clock


def compare_on(run: dict[str, Any], base: dict[str, Any], axis: str) -> dict[str, Any]:
    """``run`` minus ``base`` (one seed) at equal cost on ``axis``: at each of ``base``'s evaluations from
    2,500 generated episodes on that ``run`` reached, and at the largest cost both reached (``run``'s last
    evaluation when it spent less, as adaptive waves do)."""
    at_evals = [_diff(run, base, p[axis], axis) for p in base["curve"] if p["episodes"] >= COMPARE_FROM_EPISODES]
    common = min(run["curve"][-1][axis], base["curve"][-1][axis])
    return {"at_seed_fixed_evaluations": at_evals, "at_common_last": _diff(run, base, common, axis)}


def paired(runs: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Every config against seed/fixed of the same seed: per-seed differences and their medians."""
    base = runs[SEED_FIXED]
    seeds = sorted(base)
    out: dict[str, Any] = {}
    for config, by_seed in runs.items():
        if config == SEED_FIXED:
            continue
        entry: dict[str, Any] = {}
        axes = (*AXES, MODEL_AXIS) if all(MODEL_AXIS in p for r in (*by_seed.values(), *base.values())
                                            for p in r["curve"]) else AXES
        for axis in axes:
            per_seed = {s: compare_on(by_seed[s], base[s], axis) for s in seeds}
            n = max(len(v["at_seed_fixed_evaluations"]) for v in per_seed.values())
            # each of seed/fixed's evaluations: the seeds' differences there (None where a run did not reach it)
            columns = [{s: v["at_seed_fixed_evaluations"][i] if i < len(v["at_seed_fixed_evaluations"]) else None
                        for s, v in per_seed.items()} for i in range(n)]
            last = {s: v["at_common_last"] for s, v in per_seed.items()}
            per_eval = [_median(list(column.values())) for column in columns]
            own_last = _median(list(last.values()))
            where = [_median([base[s]["curve"][j][axis] for s in seeds]) for j, p in enumerate(base[seeds[0]]["curve"])
                     if p["episodes"] >= COMPARE_FROM_EPISODES]
            intervals = [interval(column) for column in columns]
            own_interval = interval(last)
            entry[f"at_equal_{axis}"] = {
                "seed_fixed_evaluations_at": where, "per_seed": per_seed, "median_per_evaluation": per_eval,
                "median_at_common_last": own_last,
                "worst_median": min([m for m in [*per_eval, own_last] if m is not None], default=None),
                "interval_per_evaluation": intervals, "interval_at_common_last": own_interval,
                "worst_low": min([i["low"] for i in [*intervals, own_interval] if i is not None], default=None)}
        ratios = {s: by_seed[s]["informative_per_1k_generated_episodes"] / base[s]["informative_per_1k_generated_episodes"]
                  for s in seeds}
        reach = {}
        for s in seeds:
            goal = base[s]["final_eval_success"]
            mine, theirs = to_reach(by_seed[s]["curve"], goal), to_reach(base[s]["curve"], goal)
            reach[s] = {"episodes": mine, "seed_fixed_episodes": theirs,
                        "ratio": (mine / theirs) if mine is not None and theirs else None}
        final = {s: by_seed[s]["final_eval_success"] - base[s]["final_eval_success"] for s in seeds}
        most = {s: by_seed[s]["max_trainings_per_prompt"] / base[s]["max_trainings_per_prompt"] for s in seeds}
        entry["informative_per_1k_ratio"] = {"per_seed": ratios, "median": median(ratios.values()),
                                             "interval": interval(ratios)}
        entry["final_eval_success_diff"] = {"per_seed": final, "median": median(final.values()),
                                            "interval": interval(final)}
        reach_ratio = _median([r["ratio"] if r["ratio"] is not None else float("inf") for r in reach.values()])
        entry["episodes_to_reach_seed_fixed_final"] = {
            "per_seed": reach, "median_ratio": None if reach_ratio == float("inf") else reach_ratio,
            "reached": sum(r["episodes"] is not None for r in reach.values()),
            "note": "not reached counts as infinite; a median that is infinite is null"}
        entry["max_trainings_ratio"] = {"per_seed": most, "median": median(most.values())}
        out[config] = entry
    return out


def _diff(run: dict[str, Any], base: dict[str, Any], x: float, axis: str) -> float | None:
    mine, theirs = at(run["curve"], x, axis), at(base["curve"], x, axis)
    return None if mine is None or theirs is None else mine - theirs


def summary(runs: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for config, by_seed in runs.items():
        keys = dict.fromkeys(k for run in by_seed.values() for k, v in run.items() if isinstance(v, (int, float)))
        out[config] = {k: _median([run.get(k) for run in by_seed.values()]) for k in keys}
    return out


# -- the issue's targets ------------------------------------------------------------------------------------------

def targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Met / not met, with the numbers (medians over the seeds, against seed/fixed paired by seed)."""
    out: dict[str, dict[str, Any]] = {}
    for regime, r in results["regimes"].items():
        pairs, summ = r["paired"], r["summary"]
        held = ["skip/adaptive", *(["skip/fixed"] if regime == "products_2000" else []),
                STAGED_BESIDE]
        for config in held:
            if config in pairs:
                equal = pairs[config]["at_equal_episodes"]
                worst, low = equal["worst_median"], equal["worst_low"]
                out[f"{regime}: {config} held-out success at equal generated episodes >= seed/fixed - 0.01"] = {
                    "value": worst, "met": worst is not None and worst >= -0.01,
                    "worst_interval_low": low, "met_by_every_interval": low is not None and low >= -0.01,
                    "note": "worst median over seed/fixed's evaluations from 2,500 episodes on and the largest number "
                            "of episodes both runs reached; beside it the lowest bound of the mean's 95% bootstrap "
                            "interval over the seeds at those points"}
        for config in ("skip/adaptive", STAGED_BESIDE):
            if config not in pairs:
                continue
            ratio = pairs[config]["informative_per_1k_ratio"]["median"]
            out[f"{regime}: {config} informative groups per 1k generated episodes >= 1.3x seed/fixed"] = {
                "value": ratio, "met": ratio >= 1.3}
            reach = pairs[config]["episodes_to_reach_seed_fixed_final"]["median_ratio"]
            out[f"{regime}: {config} episodes to reach seed/fixed's final success <= 0.8x (one catalog)"] = {
                "value": reach, "met": reach is not None and reach <= 0.8}
        if regime == "products_2000":
            seed_max = summ[SEED_FIXED]["max_trainings_per_prompt"]
            for config in ("skip/fixed", "skip/adaptive"):
                if config in summ and seed_max:
                    ratio = summ[config]["max_trainings_per_prompt"] / seed_max
                    out[f"{regime}: {config} most trainings of one prompt <= 1.5x seed order's"] = {
                        "value": ratio, "met": ratio <= 1.5,
                        "note": f"{summ[config]['max_trainings_per_prompt']:g} against {seed_max:g} (medians)"}
    out.update(forecast_targets(results))
    reach_keys = [k for k in out if "episodes to reach" in k and STAGED_BESIDE not in k and "forecast" not in k]
    if reach_keys:
        any_met = any(out[k]["met"] for k in reach_keys)
        for k in reach_keys:
            out[k]["met_on_at_least_one_catalog"] = any_met
    return out


def forecast_targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``forecast`` rule's targets (``FORECAST_TARGETS``), paired by seed: episodes to reach seed/fixed's final
    success, never below it by more than 0.01 at equal generated episodes from 2,500 on (the lowest bound of the 95%
    intervals), informative groups per 1,000 generated episodes, the most trainings of one prompt <= 1.5x."""
    out: dict[str, dict[str, Any]] = {}
    for regime, (reach_most, informative_least) in FORECAST_TARGETS.items():
        if regime not in results["regimes"]:
            continue
        pairs, summ = results["regimes"][regime]["paired"], results["regimes"][regime]["summary"]
        for config in (FORECAST, FORECAST_STAGED, FORECAST + LABELS, FORECAST_STAGED + LABELS):
            if config not in pairs:
                continue
            pair, name = pairs[config], f"{regime}: {config}"
            reach = pair["episodes_to_reach_seed_fixed_final"]["median_ratio"]
            out[f"{name} episodes to reach seed/fixed's final success <= {reach_most}x"] = {
                "value": reach, "met": reach is not None and reach <= reach_most}
            low = pair["at_equal_episodes"]["worst_low"]
            out[f"{name} held-out success at equal generated episodes from 2,500 on >= seed/fixed - 0.01 (95% low)"] = {
                "value": low, "met": low is not None and low >= -0.01,
                "worst_median": pair["at_equal_episodes"]["worst_median"]}
            if informative_least is not None:
                ratio = pair["informative_per_1k_ratio"]["median"]
                out[f"{name} informative groups per 1k generated episodes >= {informative_least}x seed/fixed"] = {
                    "value": ratio, "met": ratio >= informative_least,
                    "interval": pair["informative_per_1k_ratio"]["interval"]}
            most = summ[config]["max_trainings_per_prompt"] / summ[SEED_FIXED]["max_trainings_per_prompt"]
            out[f"{name} most trainings of one prompt <= 1.5x seed order's"] = {"value": most, "met": most <= 1.5}
    return out


# -- driver -------------------------------------------------------------------------------------------------------

def run_key(seed: int, repetition: int) -> str:
    """A run's key among its config's runs: the seed, and for a repetition after the first ``<seed>r<k>``.  The
    runs of a config whose prompt picks depend on when groups finish differ between repetitions of one seed."""
    return str(seed) if repetition == 0 else f"{seed}r{repetition}"


def run_regime(regime: Regime, root: Path, jobs: int) -> dict[str, dict[str, dict[str, Any]]]:
    root.mkdir(parents=True, exist_ok=True)
    todo = [(config, seed, k) for k in range(regime.repeats) for seed in regime.seeds
            for config in regime.configs]

    def one(item: tuple[str, int, int]) -> tuple[str, str, dict[str, Any]]:
        config, seed, repetition = item
        key = run_key(seed, repetition)
        name = f"{config.replace('/', '-').replace('+', '-')}-{key}"
        run = root / name
        if not (run / "metrics.jsonl").exists() or len(read_rows(run)) < regime.steps_of(config):
            shutil.rmtree(run, ignore_errors=True)
            run_one(run_argv(regime, config, seed, root, name), root / f"{name}.log")
        result = figures(run, regime.budget, regime.steps)
        for traces in run.glob("step-*/traces"):
            shutil.rmtree(traces, ignore_errors=True)  # the largest part of a run folder; nothing here reads it
        print(f"{regime.name} {name}: final {result['final_eval_success']:.3f}, inf/1k "
              f"{result['informative_per_1k_generated_episodes']:.1f}, max trainings "
              f"{result['max_trainings_per_prompt']:g}", flush=True)
        return config, key, result

    runs: dict[str, dict[str, dict[str, Any]]] = {s: {} for s in regime.configs}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for config, key, result in pool.map(one, todo):
            runs[config][key] = result
    return runs


def main(quick: bool = False, *, seeds: Sequence[int] | None = None, only: Sequence[str] | None = None,
         keep: Path | None = None, jobs: int = JOBS, out: str | None = None,
         configs: Sequence[str] | None = None, repeats: int = 1) -> dict[str, object]:
    regimes = [QUICK] if quick else list(REGIMES)
    if only:
        regimes = [r for r in regimes if r.name in only]
    if seeds or configs or repeats != 1:
        regimes = [Regime(r.name, r.products, tuple(configs or r.configs), tuple(seeds or r.seeds), r.eval_split,
                          r.eval_samples, r.steps, r.eval_every, repeats, r.max_steps) for r in regimes]
    results: dict[str, Any] = {
        "machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "wall_time": "rollout_wall_s sums rollout/shopsim/step/wall_seconds (measured, noisy on a shared machine); "
                     "env_steps sums every generated episode's env steps (deterministic: the runtime's count)",
        "regimes": {}}
    with tempfile.TemporaryDirectory(prefix="shopsimrl-bench-selection-") as tmp:
        base = keep or Path(tmp)
        for regime in regimes:
            runs = run_regime(regime, base / regime.name, jobs)
            results["regimes"][regime.name] = {
                "products": regime.products or "default", "steps": regime.steps, "max_steps": regime.max_steps,
                "budget_episodes": regime.budget, "seeds": list(regime.seeds),
                "repeats": regime.repeats,
                "eval": {"every": regime.eval_every, "samples_per_task": regime.eval_samples,
                         "split": regime.eval_split},
                "summary": summary(runs), "paired": paired(runs) if SEED_FIXED in runs else {}, "runs": runs}
    results["targets"] = targets(results)
    path = out or ("benchmarks/results/selection_quick.json" if quick else "benchmarks/results/selection.json")
    publish(path, results, {"targets": results["targets"],
                            **{n: r["summary"] for n, r in results["regimes"].items()}})
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, 10 steps, --products 2000 only")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="override the seeds (tuning: 100-104)")
    parser.add_argument("--only", nargs="+", default=None, choices=[r.name for r in REGIMES], help="these regimes")
    parser.add_argument("--configs", nargs="+", default=None,
                        help="override the configs (selection/waves[/staged]; tuning), seed/fixed first")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per config and seed, each paired with seed/fixed's of the same number (the runs "
                        "of a rule whose picks depend on when groups finish differ between repetitions; the intervals "
                        "average them into their seed)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run folders here (reused if complete)")
    parser.add_argument("--jobs", type=int, default=JOBS, help="runs at a time")
    parser.add_argument("--out", default=None, help="result file (default benchmarks/results/selection.json)")
    a = parser.parse_args()
    main(a.quick, seeds=a.seeds, only=a.only, keep=a.keep, jobs=a.jobs, out=a.out, configs=a.configs,
         repeats=a.repeats)
