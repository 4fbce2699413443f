"""A rollout run: ``steps`` rollout steps sharing one selector, one failure guard and one slot pool.

The three rollout modules: ``run.py`` (this one) is the run — its configuration, its folder and the
state that must outlive a step (the selector's position and evidence, the consecutive
technical-failure streak; held in ``context.RunContext``), created here once per run; ``driver.py``
is one step, the I/O shell around :class:`~shopsimrl.sampling.step.RolloutStep`;
``episode_runner.py`` plays one episode with the agent.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.defaults import DEFAULT_CUSHION, DEFAULT_EPISODE_CONCURRENCY, DEFAULT_OUT, DEFAULT_SEED, DEFAULT_STEPS
from shopsimrl.io import atomic_write_json
from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.driver import StepDriver
from shopsimrl.rollout.gputime import DEFAULT_CLOCK, Clock, TimeModel
from shopsimrl.rollout.group import EpisodeRunner, EpisodeSlots
from shopsimrl.rollout.journal import ResumePoint, RunJournal, new_run_id, options_digest
from shopsimrl.rollout.loops import (
    CLOCK_PREFIX,
    DEFAULT_TRAINING_LOOP,
    POLICY_LAG,
    LaggedTrainer,
    LoopClock,
    TrainingLoop,
)
from shopsimrl.rollout.outputs import RunPaths, prepare_run_dir
from shopsimrl.rollout.progress import StepObserver
from shopsimrl.rollout.report import StepReport, summary_row
from shopsimrl.sampling import ConsecutiveFailureGuard, SamplingKnobs
from shopsimrl.sampling.adaptive import horizon_for_waves
from shopsimrl.sampling.modes import (
    DEFAULT_SELECTION,
    DEFAULT_SIBLINGS,
    DEFAULT_WAVE_MODE,
    Selection,
    Siblings,
    WaveMode,
)
from shopsimrl.sampling.source import Selector, new_selector
from shopsimrl.sampling.staged import StagedSiblings


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
    selection: Selection = DEFAULT_SELECTION  # seed: the faithful order (SeedOrder); informative / spread: skip rules
    waves: WaveMode = DEFAULT_WAVE_MODE  # fixed: slime's whole waves; adaptive: predicted-size refills
    cushion: float = DEFAULT_CUSHION  # adaptive: expected informative groups in flight above the missing
    timeline: bool = False  # write each step's wave_timeline.png
    siblings: Siblings = DEFAULT_SIBLINGS  # all: every group starts whole (the seed); staged: K first
    stage_size: int | None = None  # staged: K (default n // 2)
    clock: Clock = DEFAULT_CLOCK  # machine: the measured order and seconds; modelled: the GPU time model's
    loop: TrainingLoop = DEFAULT_TRAINING_LOOP  # sync: slime's train.py; async: train_async.py (a lagged learner)
    time_model: TimeModel = field(default_factory=TimeModel)  # the modelled clock's constants

    @property
    def modelled(self) -> TimeModel | None:
        """The time model when the steps run on the modelled clock, else ``None``."""
        return self.time_model if self.clock is Clock.MODELLED else None

    @property
    def staging(self) -> StagedSiblings | None:
        if self.siblings is not Siblings.STAGED:
            return None
        return StagedSiblings.of(self.knobs.n_samples_per_prompt, self.stage_size)

    def __post_init__(self) -> None:
        for name, kind in (("selection", Selection), ("waves", WaveMode), ("siblings", Siblings), ("clock", Clock),
                           ("loop", TrainingLoop)):
            if not isinstance(getattr(self, name), kind):  # parsed once, where it was read (a string here is a bug)
                raise TypeError(f"RolloutConfig.{name} must be a {kind.__name__}, got {getattr(self, name)!r}")
        if self.stage_size is not None and self.siblings is not Siblings.STAGED:
            raise ValueError(f"a stage size ({self.stage_size}) is for staged siblings (--siblings staged)")
        self.staging  # noqa: B018  (validates the stage size)
        if not math.isfinite(self.cushion):
            raise ValueError(f"cushion (--cushion) must be a finite number of groups, got {self.cushion}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.episode_concurrency < 1:
            raise ValueError(f"episode concurrency must be >= 1, got {self.episode_concurrency}")


@dataclass
class RolloutResult:
    """A finished run: its folder and each step's report (the simulator's own is ``simulate.engine.RunResult``)."""

    paths: RunPaths
    reports: list[StepReport]  # empty unless run_rollout(keep_reports=True)
    rows: list[Mapping[str, object]] = field(default_factory=list)  # one summary row per step, always


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
    keep_reports: bool = True,
    after_batch: Callable[[int, list[dict[str, Any]]], Awaitable[dict[str, float]]] | None = None,
    first_step: int = 1,
    source: Selector | None = None,
    clusters: Mapping[str, str] | None = None,
    descriptions: Mapping[str, Mapping[str, str]] | None = None,
    resume: ResumePoint | None = None,
) -> RolloutResult:
    """Run ``config.steps`` steps; raises ``TooManyTechnicalFailures`` when the guard stops the run.

    ``paths``: a run folder already prepared (and locked) by :func:`prepare_run_dir`, which the caller
    unlocks; by default it is prepared here and unlocked when the run ends.  ``keep_reports=False`` keeps
    only each step's summary row (a report holds every group and event: 0.6 MB a step at the defaults),
    so memory stays flat however many steps run; the step's files hold the rest.  ``clusters``: each task's
    cluster label (its category) for the selector; ``descriptions``: each task's instruction and labels (the
    ``forecast`` rule's).  ``resume``: where a resumed run continues (built by
    :mod:`shopsimrl.learn.resume`, which has checked and continued ``run.json``); then ``first_step`` and
    ``source`` come from it, and ``run.json`` is not written here.
    """
    if paths is None:
        paths = prepare_run_dir(config.out, config.name)
        try:
            return await run_rollout(config, runner, task_ids, observer=observer, on_step=on_step,
                                     extra_config=extra_config, paths=paths, learner=learner,
                                     keep_reports=keep_reports, after_batch=after_batch,
                                     first_step=first_step, source=source, clusters=clusters,
                                     descriptions=descriptions, resume=resume)
        finally:
            paths.unlock()
    if resume is None:
        record = run_record(config, len(task_ids), clusters=clusters, extra=extra_config)
        journal = RunJournal(new_run_id(), options_digest(record))
        atomic_write_json(paths.config, {**record, "run_id": journal.run_id})
    else:  # run.json was checked against these options and continued by shopsimrl.learn.resume
        journal, first_step = resume.journal, resume.first_step
        source = resume.source if resume.source is not None else source
        if source is not None and hasattr(source, "describe"):  # the forecast's state must match these descriptions
            source.describe(descriptions)
    ctx = RunContext(
        knobs=config.knobs,
        runner=runner,
        source=source if source is not None else new_selector(
            config.selection, task_ids, config.knobs.n_samples_per_prompt, config.seed, waves=config.waves,
            clusters=clusters, descriptions=descriptions),
        guard=ConsecutiveFailureGuard(config.knobs.max_consecutive_failed_groups, trace_dir=str(paths.root)),
        slots=EpisodeSlots(config.episode_concurrency),
        paths=paths,
        seed=config.seed,
        observer=observer,
        waves=config.waves,
        cushion=config.cushion,
        learner=learner,
        after_batch=after_batch,
        timeline=config.timeline,
        staging=config.staging,
        journal=journal,
        time_model=config.modelled,
        loop_clock=LoopClock(config.loop, config.time_model.weight_sync_s, clock_history(paths, first_step))
        if config.modelled else None,
    )
    if ctx.learner is not None and POLICY_LAG[config.loop]:  # train_async.py: each step trains one rollout later
        ctx.learner = LaggedTrainer(ctx.learner, POLICY_LAG[config.loop])
    if resume is not None and resume.guard is not None:
        ctx.guard.load_state_dict(resume.guard)
    reports: list[StepReport] = []
    rows: list[Mapping[str, object]] = []
    for k in range(first_step, config.steps + 1):  # first_step > 1: a resumed run (shopsimrl.learn.resume)
        report = await StepDriver(ctx, k).run()
        rows.append(summary_row(report))
        if keep_reports:
            reports.append(report)
        if on_step is not None:
            on_step(report)
        del report  # not held while the next step runs
    return RolloutResult(paths, reports, rows)


def run_record(config: RolloutConfig, train_tasks: int, *, clusters: Mapping[str, str] | None = None,
               extra: Mapping[str, object] | None = None) -> dict[str, Any]:
    """What ``run.json`` records of a run (its ``run_id`` apart): every option that shapes its results."""
    horizon = horizon_for_waves(config.waves)
    return {
        "name": config.name,
        "steps": config.steps,
        "seed": config.seed,
        "episode_concurrency": config.episode_concurrency,
        "knobs": config.knobs.as_dict(),
        "train_tasks": train_tasks,
        "selection": config.selection,
        "waves": config.waves,
        **({"cushion": config.cushion} if config.waves is WaveMode.ADAPTIVE else {}),
        **({"explore_horizon_epochs": horizon} if config.selection is Selection.SPREAD else {}),
        **({"siblings": config.siblings, "stage_size": config.staging.stage_size,  # type: ignore[union-attr]
            "stage_threshold": config.staging.threshold, "stage_skip_q": config.staging.skip_q}  # type: ignore[union-attr]
           if config.staging is not None else {}),
        **({"clusters": len(set(clusters.values()))} if clusters else {}),
        # recorded when not the default, so a run of an older release resumes as it was
        **({"clock": config.clock, "time_model": config.time_model.as_dict()} if config.modelled else {}),
        **({"loop": config.loop} if config.loop is not DEFAULT_TRAINING_LOOP else {}),
        **(extra or {}),
    }


def clock_history(paths: RunPaths, first_step: int) -> list[tuple[float, float]]:
    """The modelled rollout and training seconds of the steps before ``first_step`` (a resumed run's clock)."""
    if first_step <= 1 or not paths.metrics.exists():
        return []
    rows = [json.loads(line) for line in paths.metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(float(r[CLOCK_PREFIX + "rollout_s"]), float(r[CLOCK_PREFIX + "train_s"])) for r in rows
            if int(r["step"]) < first_step and CLOCK_PREFIX + "rollout_s" in r]
