"""What the steps of one run share, handed to each step's driver.

Some state must outlive a step: the guard's streak of technical groups, the selector's
position and evidence, the episode slots.  ``run.py`` builds it once per run; each
:class:`~shopsimrl.rollout.driver.StepDriver` reads it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.defaults import DEFAULT_CUSHION
from shopsimrl.rollout.gputime import TimeModel
from shopsimrl.rollout.group import EpisodeRunner, EpisodeSlots
from shopsimrl.rollout.journal import RunJournal
from shopsimrl.rollout.loops import LoopClock
from shopsimrl.rollout.outputs import RunPaths
from shopsimrl.rollout.progress import StepObserver
from shopsimrl.sampling import ConsecutiveFailureGuard, SamplingKnobs
from shopsimrl.sampling.modes import DEFAULT_WAVE_MODE, WaveMode, is_faithful
from shopsimrl.sampling.selector import RuleSelector
from shopsimrl.sampling.staged import StagedSiblings
from shopsimrl.sampling.step import RolloutStep, new_step


@dataclass
class RunContext:
    """What the steps of one run share: the guard's streak, the selector's position, the slots."""

    knobs: SamplingKnobs
    runner: EpisodeRunner
    source: RuleSelector  # the selector: SeedOrder (the faithful order), SkipOrder or SpreadSelector
    guard: ConsecutiveFailureGuard
    slots: EpisodeSlots
    paths: RunPaths
    seed: int = 0
    observer: StepObserver | None = None
    clock: Callable[[], float] = time.perf_counter
    time_model: TimeModel | None = None  # the modelled GPU clock (modelled.py); None: the machine's clock
    waves: WaveMode = DEFAULT_WAVE_MODE  # fixed: slime's whole waves; adaptive: predicted-size refills
    cushion: float = DEFAULT_CUSHION  # adaptive waves: expected informative groups in flight above the missing
    learner: Callable[[list[str]], None] | None = None  # trained on these tasks' informative groups
    # a learner trained on (step, batch rows) before the step's metrics are written; its metrics join the row
    after_batch: Callable[[int, list[dict[str, Any]]], Awaitable[dict[str, float]]] | None = None
    timeline: bool = False  # draw each step's wave timeline into its folder
    staging: StagedSiblings | None = None  # staged siblings (opt-in); None: every group starts whole
    journal: RunJournal = field(default_factory=RunJournal.detached)  # each step's completion marker (journal.py)
    loop_clock: LoopClock | None = None  # the modelled clock: each step's rollout, training and sync on slime's loop

    @property
    def faithful(self) -> bool:
        """The seed's own sampling (seed order, whole waves): the step metrics carry no selector figures."""
        return is_faithful(self.source.selection, self.waves)

    def run_state(self) -> dict[str, Any]:
        """What the next step needs of the run, saved into each step's ``state.json`` (``--resume`` reads it)."""
        return {"prompt_source": self.source.state_dict(), "guard": self.guard.state_dict()}

    def rollout_step(self) -> RolloutStep:
        """A step's sans-I/O object: the run's guard (its streak spans steps), source, wave mode and staging."""
        knobs = self.knobs
        return new_step(knobs.rollout_batch_size, knobs.over_sampling_batch_size, knobs.n_samples_per_prompt,
                        source=self.source, waves=self.waves, cushion=self.cushion, staging=self.staging,
                        guard=self.guard)
