"""Why a selector that trains more informative groups can train a worse policy: the mechanism, measured.

Reads the run folders ``python -m benchmarks.bench_selection --keep DIR`` leaves
(``DIR/products_2000/<selection>-<waves>-<seed>``) and, per seed, compares a selection
config's run (``--config``, default ``spread/fixed``) with seed/fixed's:

- **concentration**: the prompts the config trains after ``EXPLORATION_STEPS`` (its *focus
  set*: trained at least ``FOCUS_MIN_TRAININGS`` times after then) against the seed order's;
- **the focus prompts are not representative**: the share of prompts whose goal product is the
  first search result for the shopper's full query (every content word of the instruction, as
  the embedded shopper reads it), in the focus set and among the other train prompts;
- **who gains, who loses**: each train prompt's sampled success (``SAMPLES`` episodes) under the
  untrained parameters, the config's last ones and the seed order's last ones, averaged over
  the focus set and the other prompts, and over the prompts whose goal is (or is not) the first
  result (the two directions of the simulator's ``learner_2000`` world);
- **which weights carry the loss**: seed/fixed's last parameters with one block (``result``,
  "which result to open", and for contrast every other block) swapped in from the config's
  last ones, evaluated on val+test like the benchmark.

``python -m benchmarks.diagnose_selection DIR [--config spread/fixed] [--seeds 0 1 2 3 4]``
writes ``benchmarks/results/selection_mechanism.json``.  Not timed.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean, median
from typing import Any

from benchmarks.bench_selection import trained_groups
from benchmarks.common import machine, publish

PRODUCTS = 2000
EXPLORATION_STEPS = 10  # the steps before which every selector still explores (the diagnosis)
FOCUS_MIN_TRAININGS = 3  # trained this often after exploration: the config's focus set
SAMPLES = 16  # sampled episodes per task in every evaluation here
HELD_OUT = "val+test"


def load_theta(path: Path) -> list[float]:
    from shopsimrl.learn.learner import load_state

    return load_state(path)[0]


def last_step(run: Path) -> Path:
    return max(run.glob("step-*/policy.npz"), key=lambda p: int(p.parent.name.split("-")[1]))


def focus_set(run: Path) -> dict[str, int]:
    """Prompts trained at least ``FOCUS_MIN_TRAININGS`` times after ``EXPLORATION_STEPS``, with their counts."""
    counts: dict[str, int] = {}
    for step, task in trained_groups(run):
        if step > EXPLORATION_STEPS:
            counts[task] = counts.get(task, 0) + 1
    return {t: n for t, n in counts.items() if n >= FOCUS_MIN_TRAININGS}


def goal_first_share_of_trained(run: Path, first: dict[str, bool], after: int = EXPLORATION_STEPS) -> float:
    """The share of the groups trained after step ``after`` whose goal is the first result."""
    late = [task for step, task in trained_groups(run) if step > after]
    return sum(first[t] for t in late) / len(late)


def goal_first(env: Any, task_ids: Sequence[str]) -> dict[str, bool]:
    """Whether each task's goal product is the first search result for the shopper's full query."""
    from shopsimrl.agent.heuristic import _Request  # the shopper's own reading of an instruction

    out = {}
    for task_id in task_ids:
        words = _Request.read(env.get_task(task_id).instruction).words
        hits = env.search(" ".join(words)).rowids
        first = env.products(hits[:1])[0].product_id if hits else None
        out[task_id] = first == env.goal_product(task_id).product_id
    return out


async def success(client: Any, theta: Sequence[float], task_ids: Sequence[str], seed: int) -> dict[str, float]:
    """Per-task sampled success of ``theta`` (the benchmark's eval seeds for ``seed``)."""
    from shopsimrl.learn.evaluate import evaluate_parameters, success_by_task

    _metrics, record = await evaluate_parameters(theta, client, task_ids, seed=seed, samples=SAMPLES)
    return success_by_task(record)


def _mean(rates: dict[str, float], tasks: Sequence[str]) -> float | None:
    values = [rates[t] for t in tasks if t in rates]
    return fmean(values) if values else None


async def diagnose_seed(client: Any, env: Any, root: Path, config: str, seed: int) -> dict[str, Any]:
    from shopsimrl.learn.params import BLOCKS, LAYOUT

    chosen, seed_run = root / f"{config.replace('/', '-')}-{seed}", root / f"seed-fixed-{seed}"
    train = env.list_tasks("train")
    held_out = env.list_tasks("val") + env.list_tasks("test")
    focus = focus_set(chosen)
    seed_focus = focus_set(seed_run)
    rest = [t for t in train if t not in focus]
    first = goal_first(env, train)
    theta0 = LAYOUT.initial()
    mine, theirs = load_theta(last_step(chosen)), load_theta(last_step(seed_run))
    rates = {name: await success(client, theta, train, seed)
             for name, theta in (("untrained", theta0), ("strategy_last", mine), ("seed_fixed_last", theirs))}
    swaps: dict[str, float] = {}
    for name, theta in (("seed_fixed_last", theirs), ("strategy_last", mine)):
        swaps[name] = fmean((await success(client, theta, held_out, seed)).values())
    for block in BLOCKS:
        swapped = list(theirs)
        swapped[LAYOUT.slice(block)] = mine[LAYOUT.slice(block)]
        swaps[f"seed_fixed_last_with_strategy_{block}_block"] = fmean((await success(client, swapped, held_out,
                                                                                      seed)).values())
    return {
        "focus_prompts": len(focus),
        "focus_share_of_trained_after_exploration": sum(focus.values()) / max(1, sum(
            1 for step, _t in trained_groups(chosen) if step > EXPLORATION_STEPS)),
        "seed_fixed_prompts_trained_3_times_after_exploration": len(seed_focus),
        "goal_first_share": {"focus": fmean(first[t] for t in focus) if focus else None,
                             "other_train": fmean(first[t] for t in rest), "all_train": fmean(first.values())},
        "train_success": {name: {"focus": _mean(r, list(focus)), "other_train": _mean(r, rest),
                                 "goal_first": _mean(r, [t for t in train if first[t]]),
                                 "goal_not_first": _mean(r, [t for t in train if not first[t]])}
                          for name, r in rates.items()},
        "held_out_success_with_swapped_blocks": swaps,
        "result_weights": {"strategy_last": dict(zip(BLOCKS["result"], mine[LAYOUT.slice("result")])),
                           "seed_fixed_last": dict(zip(BLOCKS["result"], theirs[LAYOUT.slice("result")]))},
    }


async def diagnose(root: Path, config: str, seeds: Sequence[int]) -> dict[str, Any]:
    from shopsimrl.env import InProcessEnvClient
    from shopsimrl.env.core import load_env

    env = load_env(PRODUCTS, slots=64)
    client = InProcessEnvClient(env, owns_env=True)
    try:
        per_seed = {seed: await diagnose_seed(client, env, root, config, seed) for seed in seeds}
    finally:
        await client.aclose()
    return per_seed


async def kinds(root: Path, configs: Sequence[str], seeds: Sequence[int]) -> dict[str, Any]:
    """The learner's figures the simulator's ``learner_2000`` world is fitted to: the share of train prompts whose
    goal is the first result, and each kind's mean train success untrained and after each config's run."""
    from shopsimrl.env import InProcessEnvClient
    from shopsimrl.env.core import load_env
    from shopsimrl.learn.params import LAYOUT

    env = load_env(PRODUCTS, slots=64)
    client = InProcessEnvClient(env, owns_env=True)
    train = env.list_tasks("train")
    first = goal_first(env, train)
    a, b = [t for t in train if first[t]], [t for t in train if not first[t]]
    out: dict[str, Any] = {"goal_first_share": len(a) / len(train), "train_tasks": len(train), "per_seed": {}}
    try:
        for seed in seeds:
            row: dict[str, Any] = {}
            for name, theta in (("untrained", LAYOUT.initial()),
                                *((st, load_theta(last_step(root / f"{st.replace('/', '-')}-{seed}")))
                                  for st in configs)):
                rates = await success(client, theta, train, seed)
                row[name] = {"goal_first": _mean(rates, a), "goal_not_first": _mean(rates, b),
                             "all": _mean(rates, train)}
                if name != "untrained":
                    row[name]["goal_first_share_of_trained_after_10"] = goal_first_share_of_trained(
                        root / f"{name.replace('/', '-')}-{seed}", first)
                if name == "untrained":
                    row[name]["per_task"] = {t: rates[t] for t in train}
            out["per_seed"][seed] = row
    finally:
        await client.aclose()
    out["goal_first"] = {t: first[t] for t in train}
    return out


def medians(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The median over seeds of every number, at the same place in the nesting."""
    first = next(iter(per_seed.values()))

    def walk(node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, (*path, k)) for k, v in node.items()}
        values = []
        for one in per_seed.values():
            for key in path:
                one = one[key]
            values.append(one)
        kept = [v for v in values if isinstance(v, (int, float))]
        return median(kept) if kept else None

    return walk(first, ())


def main(root: Path, config: str, seeds: Sequence[int], out: str) -> dict[str, Any]:
    per_seed = asyncio.run(diagnose(root, config, seeds))
    results = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "strategy": config,
               "seeds": list(seeds), "products": PRODUCTS, "samples_per_task": SAMPLES, "held_out": HELD_OUT,
               "exploration_steps": EXPLORATION_STEPS, "focus_min_trainings": FOCUS_MIN_TRAININGS,
               "median": medians(per_seed), "per_seed": per_seed}
    publish(out, results, results["median"])
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the products_2000 folder of bench_selection --keep DIR, or DIR")
    parser.add_argument("--config", default="spread/fixed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default="benchmarks/results/selection_mechanism.json")
    parser.add_argument("--kinds", nargs="+", default=None, metavar="CONFIG",
                        help="instead: each kind's train success untrained and after these strategies' runs (the "
                        "simulator's fit data)")
    a = parser.parse_args()
    root = a.root / "products_2000" if (a.root / "products_2000").is_dir() else a.root
    if a.kinds:
        publish(a.out, asyncio.run(kinds(root, ["seed/fixed", *a.kinds], a.seeds)), {})
    else:
        main(root, a.config, a.seeds, a.out)
