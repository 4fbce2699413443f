"""A rollout run: ``steps`` rollout steps sharing one task sampler, one failure guard and one slot pool.

State that must outlive a step (the sampler's epoch position, the consecutive
technical-failure streak) lives in explicit objects created here, once per run.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shopsimrl.io import atomic_write_json
from shopsimrl.rollout.defaults import DEFAULT_EPISODE_CONCURRENCY, DEFAULT_OUT, DEFAULT_SEED, DEFAULT_STEPS
from shopsimrl.rollout.driver import RunContext, StepDriver, StepObserver
from shopsimrl.rollout.group import EpisodeRunner, EpisodeSlots
from shopsimrl.rollout.outputs import RunPaths, prepare_run_dir
from shopsimrl.rollout.report import StepReport
from shopsimrl.rollout.tasks import TaskSampler
from shopsimrl.sampling import ConsecutiveFailureGuard, SamplingKnobs
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, DEFAULT_WAVES, WAVE_MODES, AdaptiveWaves, horizon_for_waves
from shopsimrl.sampling.selector import DEFAULT_STRATEGY, STRATEGIES, PromptSelector


def default_run_name() -> str:
    """The time to the second plus 16 random bits: two runs started in the same second still differ."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class RolloutConfig:
    knobs: SamplingKnobs = field(default_factory=SamplingKnobs)
    steps: int = DEFAULT_STEPS
    seed: int = DEFAULT_SEED
    out: Path = DEFAULT_OUT
    name: str = field(default_factory=default_run_name)
    episode_concurrency: int = DEFAULT_EPISODE_CONCURRENCY
    selection: str = DEFAULT_STRATEGY  # "seed": the faithful TaskSampler order; "informative": PromptSelector
    waves: str = DEFAULT_WAVES  # "fixed": slime's whole waves; "adaptive": predicted-size refills
    cushion: float = DEFAULT_CUSHION  # adaptive: expected informative groups in flight above the missing
    timeline: bool = False  # write each step's wave_timeline.png

    def __post_init__(self) -> None:
        if self.selection not in STRATEGIES:
            raise ValueError(f"selection must be one of {', '.join(STRATEGIES)}, got {self.selection!r}")
        if self.waves not in WAVE_MODES:
            raise ValueError(f"waves must be one of {', '.join(WAVE_MODES)}, got {self.waves!r}")
        if not math.isfinite(self.cushion):
            raise ValueError(f"cushion must be a finite number, got {self.cushion}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.episode_concurrency < 1:
            raise ValueError(f"episode concurrency must be >= 1, got {self.episode_concurrency}")


@dataclass
class RunResult:
    paths: RunPaths
    reports: list[StepReport]


async def run_rollout(
    config: RolloutConfig,
    runner: EpisodeRunner,
    task_ids: Sequence[str],
    *,
    observer: StepObserver | None = None,
    on_step: Callable[[StepReport], None] | None = None,
    extra_config: dict[str, object] | None = None,
    paths: RunPaths | None = None,
    learner: Callable[[list[str]], None] | None = None,
    clusters: Mapping[str, str] | None = None,
) -> RunResult:
    """Run ``config.steps`` steps; raises ``TooManyTechnicalFailures`` when the guard stops the run.

    ``paths``: a run folder already prepared (and locked) by :func:`prepare_run_dir`, which the caller
    unlocks; by default it is prepared here and unlocked when the run ends.  ``clusters``: each task's cluster
    label (its category) for the prompt selector.
    """
    if paths is None:
        paths = prepare_run_dir(config.out, config.name)
        try:
            return await run_rollout(config, runner, task_ids, observer=observer, on_step=on_step,
                                     extra_config=extra_config, paths=paths, learner=learner, clusters=clusters)
        finally:
            paths.unlock()
    uses_selector = config.selection != "seed" or config.waves == "adaptive"
    horizon = horizon_for_waves(config.waves)
    atomic_write_json(paths.config, {
        "name": config.name,
        "steps": config.steps,
        "seed": config.seed,
        "episode_concurrency": config.episode_concurrency,
        "knobs": config.knobs.as_dict(),
        "train_tasks": len(task_ids),
        "selection": config.selection,
        "waves": config.waves,
        **({"cushion": config.cushion} if config.waves == "adaptive" else {}),
        **({"explore_horizon_epochs": horizon} if config.selection == "informative" else {}),
        **({"clusters": len(set(clusters.values()))} if clusters else {}),
        **(extra_config or {}),
    })
    knobs = config.knobs
    ctx = RunContext(
        knobs=config.knobs,
        runner=runner,
        sampler=TaskSampler(task_ids, seed=config.seed),
        guard=ConsecutiveFailureGuard(config.knobs.max_consecutive_failed_groups, trace_dir=str(paths.root)),
        slots=EpisodeSlots(config.episode_concurrency),
        paths=paths,
        seed=config.seed,
        observer=observer,
        selector=PromptSelector(task_ids, knobs.n_samples_per_prompt, config.selection, config.seed,
                                explore_horizon_epochs=horizon, clusters=clusters) if uses_selector else None,
        adaptive=AdaptiveWaves(knobs.rollout_batch_size, knobs.over_sampling_batch_size, config.cushion)
        if config.waves == "adaptive" else None,
        learner=learner,
        timeline=config.timeline,
    )
    reports: list[StepReport] = []
    for k in range(1, config.steps + 1):
        report = await StepDriver(ctx, k).run()
        reports.append(report)
        if on_step is not None:
            on_step(report)
    return RunResult(paths, reports)
