"""Selections side by side on the same simulated world, and the pictures that show the difference."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import Any

from shopsimrl.io import atomic_write_bytes
from shopsimrl.rollout.loops import DEFAULT_TRAINING_LOOP, TrainingLoop, TrainTiming
from shopsimrl.rollout.timeline import FATE_COLOURS, draw_wave_timeline, render_png
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.simulate.engine import RunResult, simulate_run
from shopsimrl.simulate.model import WorldParams

#: (selection, waves) pairs compared by default: the faithful run first.
CONFIGURATIONS: tuple[tuple[str, ...], ...] = (
    ("seed", "fixed"),
    ("skip", "fixed"),
    ("seed", "adaptive"),
    ("skip", "adaptive"),
    ("seen-oracle", "adaptive"),
    ("oracle", "fixed"),
    ("oracle", "adaptive"),
)
#: In a world with directions (prompts that disagree about what to learn): the five selections the main job's
#: learner ranks (docs/learning.md).
DIRECTION_CONFIGURATIONS: tuple[tuple[str, ...], ...] = (
    ("seed", "fixed"),
    ("spread", "fixed"),
    ("spread", "adaptive"),
    ("skip", "fixed"),
    ("skip", "adaptive"),
)
#: In a clustered world, also the selector that is not told the clusters (as before labels were known).
UNLABELLED = ("skip", "adaptive", "no labels")
#: Figures of clustered worlds (medians over seeds, and the fewest clusters generated in any seed).
CLUSTER_KEYS = ("cluster_final_pass_min", "cluster_final_pass_median")
SUMMARY_KEYS = (
    "informative_per_1k_generated_episodes",
    "generated_per_trained_episode",
    "informative_share_of_trained",
    "final_mean_pass_rate",
    "coverage",
    "mean_step_wall_s",
    "wall_s_per_informative_group",
)
#: With a training time per step (``timing``): the loop's wall time, beside the rollouts' above.
LOOP_KEYS = ("loop_mean_step_wall_s", "loop_wall_s_per_informative_group")


def compare(
    *,
    steps: int = 80,
    seeds: Sequence[int] = (0, 1, 2),
    world: WorldParams | None = None,
    selections: Sequence[tuple[str, ...]] | None = None,
    timeline_step: int | None = None,
    staging: StagedSiblings | None = None,
    capacity: float | None = None,
    loop: TrainingLoop | str = DEFAULT_TRAINING_LOOP,
    timing: TrainTiming | None = None,
) -> dict[str, Any]:
    """Run every selection on every seed (same worlds); medians over seeds per selection.

    A selection is ``(selection, waves)``, or ``(selection, waves, "no labels")`` for a selector not told a clustered
    world's clusters; by default ``CONFIGURATIONS``, and ``UNLABELLED`` too in a clustered world.  The ``oracle`` rows
    read the world's true pass rates: the bound for any selector in that world.  ``staging``: each selection also
    runs with staged siblings, as ``<selection>+staged``; ``capacity`` (episodes at full speed,
    :mod:`~shopsimrl.simulate.capacity`) times every row under the capacity model.  ``loop`` runs every row in
    slime's ``train.py`` (``sync``) or ``train_async.py`` (``async``, :mod:`~shopsimrl.rollout.loops`); with
    ``timing`` (training and weight-sync seconds per step) the summary adds the loop's wall time (``LOOP_KEYS``).
    """
    world = world or WorldParams()
    if selections is None:
        selections = (*CONFIGURATIONS, UNLABELLED) if world.clusters else DIRECTION_CONFIGURATIONS if world.directions \
            else CONFIGURATIONS
    runs: dict[str, list[RunResult]] = {}
    for selection, waves, *blind in selections:
        for staged in (None, staging) if staging is not None else (None,):
            label = f"{selection}/{waves}" + (f", {blind[0]}" if blind else "") + ("+staged" if staged else "")
            keep = (timeline_step,) if timeline_step else ()
            runs[label] = [
                simulate_run(selection=selection, waves=waves, steps=steps, seed=s, world=world,
                             keep_timelines=keep if i == 0 else (), label=label, labels=not blind, staging=staged,
                             capacity=capacity, loop=loop, timing=timing)
                for i, s in enumerate(seeds)
            ]
    keys = SUMMARY_KEYS + (LOOP_KEYS if timing is not None else ()) + (CLUSTER_KEYS if world.clusters else ()) + (
        tuple(f"kind_{k}_{when}_pass_rate" for when in ("initial", "final") for k in range(world.directions)))
    summary = {
        label: {key: median(r.summary(8)[key] for r in rs) for key in keys}
        | ({"clusters_generated_min": min(r.clusters_generated or 0 for r in rs)} if world.clusters else {})
        for label, rs in runs.items()
    }
    return {"world": world.as_dict(), "steps": steps, "seeds": list(seeds), "summary": summary, "runs": runs,
            "capacity": capacity}


def draw_cluster_pass_rates(path: str | Path, runs: dict[str, list[RunResult]]) -> Path:
    """Each cluster's final mean pass rate (first seed), sorted, one line per selection: the clusters left behind."""

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        for label, rs in runs.items():
            rates = sorted(rs[0].cluster_pass_rates)
            ax.plot([(j + 0.5) / len(rates) for j in range(len(rates))], rates, marker=".", label=label)
        ax.set_xlabel("clusters, sorted by final pass rate (share)")
        ax.set_ylabel("final mean pass rate of the cluster")
        ax.set_title("per-cluster final pass rate (first seed)", fontsize=9, loc="left")
        ax.legend(loc="lower right", fontsize=7)

    return atomic_write_bytes(path, render_png(draw, size=(8.0, 4.5)))


def draw_step_bars(path: str | Path, runs: dict[str, list[RunResult]]) -> Path:
    """Per step, stacked bars of informative kept / fallback / zero-std dropped / aborted, one panel per selection."""
    labels = list(runs)
    parts = (("accepted", "informative kept"), ("fallback", "fallback (zero-std kept)"),
             ("zero_std_dropped", "zero-std dropped"), ("aborted", "aborted"))
    colours = {"accepted": FATE_COLOURS["accepted"], "fallback": FATE_COLOURS["fallback"],
               "zero_std_dropped": FATE_COLOURS["dropped_zero_std"], "aborted": FATE_COLOURS["aborted"]}

    def draw(fig: Any) -> None:
        axes = fig.subplots(len(labels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, label in zip(axes, labels):
            steps = runs[label][0].steps
            x = [r.step for r in steps]
            bottom = [0.0] * len(steps)
            for key, name in parts:
                values = [float(getattr(r, key)) for r in steps]
                ax.bar(x, values, bottom=bottom, width=0.9, color=colours[key], label=name)
                bottom = [b + v for b, v in zip(bottom, values)]
            ax.set_ylim(0, max(r.submitted for r in steps) * 1.08)
            ax.set_ylabel("groups")
            ax.set_title(label, fontsize=9, loc="left")
        axes[0].legend(loc="upper right", ncol=4, fontsize=7)
        axes[-1].set_xlabel("rollout step")

    png = render_png(draw, size=(10.0, 2.2 * len(labels) + 0.6))
    return atomic_write_bytes(path, png)


def draw_timeline(path: str | Path, run: RunResult, step: int) -> Path:
    events = run.timelines[step]
    png = render_png(lambda fig: draw_wave_timeline(fig.add_subplot(), events,
                                                    title=f"{run.label}, simulated step {step}"),
                     size=(9.0, min(12.0, 2.4 + 0.12 * len([e for e in events if e['event'] == 'decision']))))
    return atomic_write_bytes(path, png)


def with_overrides(world: WorldParams, **overrides: Any) -> WorldParams:
    return replace(world, **{k: v for k, v in overrides.items() if v is not None})
