"""The async driver of one rollout step: the main job's I/O shell around ``RolloutStep``.

:class:`shopsimrl.sampling.step.RolloutStep` decides everything (waves, the filter, the
drop rule, the fallback, the stop, the prompts); the driver does what slime's
``generate_rollout_async`` does around its loop: start the groups it names, await the
first finished group, take every other group already finished as the same batch, hand
the batch over; at ``target`` kept groups, cancel everything still in flight and wait for
it (each episode releases its env session while it unwinds).  Outputs: the step's
``events.jsonl``, triage, ``batch.jsonl`` and ``metrics.json``.

Completion costs O(1) per group: each group task pushes itself into an
:class:`asyncio.Queue` from a done-callback (:class:`CompletionQueue`), instead of
an ``asyncio.wait`` over the whole pending set at every completion.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from shopsimrl.rollout.group import (
    EpisodeRunner,
    EpisodeSlots,
    EpisodeSpec,
    GroupRun,
    episode_seed,
    never_succeeded,
    run_group,
    run_rest,
)
from shopsimrl.rollout.outputs import (
    RunPaths,
    append_failure_queue,
    batch_records,
    write_batch,
    write_events,
    write_step_metrics,
    write_triage,
)
from shopsimrl.rollout.report import StepReport, step_metrics
from shopsimrl.sampling import (
    DROP_REASONS,
    ConsecutiveFailureGuard,
    Decision,
    GroupDecision,
    SamplingKnobs,
    State,
    TooManyTechnicalFailures,
    Verdict,
)
from shopsimrl.sampling.adaptive import DEFAULT_CUSHION, AdaptiveWaves
from shopsimrl.sampling.modes import DEFAULT_WAVE_MODE, WaveMode, is_faithful
from shopsimrl.sampling.order import SeedOrder
from shopsimrl.sampling.selector import PromptSelector, selector_step_metrics
from shopsimrl.sampling.staged import StagedSiblings, staged_step_metrics
from shopsimrl.sampling.step import AdaptiveRefills, FixedWaves, RolloutStep, Start, StepDone, WaveSizer
from shopsimrl.sampling.verdict import unique_rollout_rewards

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class CompletionQueue(Generic[K, T]):
    """Tasks that report their own completion: O(1) per finished task, batches as slime sees them."""

    def __init__(self) -> None:
        self._pending: dict[K, asyncio.Task[T]] = {}
        self._done: asyncio.Queue[tuple[K, asyncio.Task[T]]] = asyncio.Queue()

    def __len__(self) -> int:
        """Tasks not yet finished."""
        return len(self._pending)

    def add(self, key: K, task: asyncio.Task[T]) -> None:
        self._pending[key] = task
        task.add_done_callback(partial(self._finished, key))

    def _finished(self, key: K, task: asyncio.Task[T]) -> None:
        if self._pending.pop(key, None) is not None and not task.cancelled():
            self._done.put_nowait((key, task))

    async def next_batch(self) -> list[tuple[K, asyncio.Task[T]]]:
        """Wait for one finished task, then take every other one that has finished too."""
        batch = [await self._done.get()]
        while not self._done.empty():
            batch.append(self._done.get_nowait())
        return batch

    async def cancel_all(self) -> tuple[list[K], list[K]]:
        """Cancel every unfinished task and wait until all have unwound.

        Returns (cancelled keys, keys that had finished but were never taken by ``next_batch``).
        """
        tasks = list(self._pending.values())
        cancelled = [key for key, task in list(self._pending.items()) if task.cancel()]  # False: already done
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pending.clear()
        undelivered = []
        while not self._done.empty():
            key, task = self._done.get_nowait()
            task.exception()  # retrieved: a failure of a task nobody judged is not logged as never retrieved
            undelivered.append(key)
        return cancelled, undelivered


def _rewards(group: GroupRun) -> list[float] | None:
    """A finished group's rewards per unique rollout, for the prompt source; ``None``: not scored."""
    return None if group.verdict is Verdict.TECHNICAL else list(unique_rollout_rewards(group.samples()).values())


def _results(batch: list[tuple[int, asyncio.Task[GroupRun]]]) -> list[GroupRun]:
    """Every task's result; if some raised (an output that could not be written), every exception is
    retrieved (asyncio logs none as never retrieved) and the first is raised."""
    errors = [task.exception() for _key, task in batch]
    for error in errors:
        if error is not None:
            raise error
    return [task.result() for _key, task in batch]


@dataclass
class WaveStats:
    """One wave's line in the live view."""

    wave: int
    submitted: int = 0
    completed: int = 0
    accepted: int = 0
    fallback: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {r: 0 for r in DROP_REASONS})
    surplus: int = 0
    aborted: int = 0
    running: int = 0  # filled in by snapshots: groups with an episode slot, not finished

    @property
    def kept(self) -> int:
        return self.accepted + self.fallback


@dataclass
class StepProgress:
    """What the live view shows of a running step."""

    step: int
    elapsed: float
    target: int
    kept: int
    remaining: int
    episodes_running: int
    waves: list[WaveStats]
    state: State


class StepObserver(Protocol):
    """Receives the step's progress (the live view); every call comes from the event loop."""

    def step_started(self, step: int, target: int) -> None: ...

    def progressed(self, snapshot: Callable[[], StepProgress]) -> None: ...

    def step_finished(self, report: StepReport | None, progress: StepProgress) -> None: ...


@dataclass
class RunContext:
    """What the steps of one run share: the guard's streak, the prompt source's position, the slots."""

    knobs: SamplingKnobs
    runner: EpisodeRunner
    source: PromptSelector  # the prompt source: SeedOrder (the faithful order) or the informative PromptSelector
    guard: ConsecutiveFailureGuard
    slots: EpisodeSlots
    paths: RunPaths
    seed: int = 0
    observer: StepObserver | None = None
    clock: Callable[[], float] = time.perf_counter
    waves: WaveMode = DEFAULT_WAVE_MODE  # fixed: slime's whole waves; adaptive: predicted-size refills
    cushion: float = DEFAULT_CUSHION  # adaptive waves: expected informative groups in flight above the missing
    learner: Callable[[list[str]], None] | None = None  # trained on these tasks' informative groups
    # a learner trained on (step, batch rows) before the step's metrics are written; its metrics join the row
    after_batch: Callable[[int, list[dict[str, Any]]], Awaitable[dict[str, float]]] | None = None
    timeline: bool = False  # draw each step's wave timeline into its folder
    staging: StagedSiblings | None = None  # staged siblings (opt-in); None: every group starts whole

    @property
    def faithful(self) -> bool:
        """The seed's own sampling (seed order, whole waves): the step metrics carry no selector figures."""
        return is_faithful(self.source.strategy, self.waves)

    def wave_sizer(self) -> WaveSizer:
        knobs, n = self.knobs, self.knobs.n_samples_per_prompt
        if WaveMode.parse(self.waves) is WaveMode.ADAPTIVE:
            return AdaptiveRefills(AdaptiveWaves(knobs.rollout_batch_size, knobs.over_sampling_batch_size,
                                                 self.cushion), n)
        return FixedWaves(n)


class StepDriver:
    """One rollout step: the I/O shell around :class:`~shopsimrl.sampling.step.RolloutStep`.

    ``await StepDriver(ctx, k).run()`` returns its report (outputs written).  The step object decides;
    this class starts the groups it names as asyncio tasks, hands it each batch of finished groups,
    cancels what it says to abort, and writes the events, the batch and the metrics.
    """

    def __init__(self, ctx: RunContext, step: int) -> None:
        self.ctx = ctx
        self.step = step
        self.paths = ctx.paths.step(step)
        knobs = ctx.knobs
        self.rollout = RolloutStep(  # the run's guard carries max_consecutive_failed_groups
            knobs.rollout_batch_size, knobs.over_sampling_batch_size, source=ctx.source, sizer=ctx.wave_sizer(),
            guard=ctx.guard, staging=ctx.staging,
        )
        self.controller = self.rollout.controller  # read-only here: the live view's counters
        self.groups: dict[int, GroupRun] = {}
        self.waves: dict[int, WaveStats] = {}
        self.events: list[dict[str, Any]] = []
        self.completions: CompletionQueue[int, GroupRun] = CompletionQueue()
        self.decisions: dict[int, str] = {}
        self.batches = 0
        self.wall_seconds = 0.0
        self.done: StepDone | None = None
        self._t0 = 0.0
        self._first_stage: set[int] = set()  # staged groups running their first K siblings

    def _now(self) -> float:
        return self.ctx.clock() - self._t0

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> StepReport:
        ctx = self.ctx
        ctx.guard.trace_dir = str(self.paths.root)  # the step folder: traces/ and triage/ are both in it
        self._t0 = ctx.clock()
        observer = ctx.observer
        if observer:
            observer.step_started(self.step, self.controller.target)
        position = {"sampler": ctx.source.position()} if isinstance(ctx.source, SeedOrder) else {}
        self._event(0.0, "step_start", step=self.step, knobs=ctx.knobs.as_dict(), **position)
        try:
            try:
                self._act(0.0, self.rollout.start())
                while not self.rollout.done:
                    batch = await self.completions.next_batch()
                    now = self._now()
                    self.batches += 1
                    self._decide(now, _results(batch))
                    if observer:
                        observer.progressed(self.progress)
            except TooManyTechnicalFailures as exc:
                self._event(self._now(), "stopped", reason="too_many_technical_failures", message=str(exc),
                            groups=[int(g) for g in exc.groups])
                raise
            except asyncio.CancelledError as exc:  # interrupted (SIGINT / SIGTERM) or cancelled by the caller
                self._event(self._now(), "stopped", reason="interrupted",
                            signal=str(exc.args[0]) if exc.args and exc.args[0] else None)
                raise
            except OSError as exc:  # an output could not be written (disk full, ...): the step is incomplete
                self._event(self._now(), "stopped", reason="write_failed", errno=exc.errno,
                            message=f"{type(exc).__name__}: {exc}")
                raise
            finally:
                await self._abort()
                write_events(self.paths, self.events)
        except BaseException:
            if observer:
                observer.step_finished(None, self.progress())
            raise
        report = self._report()
        self._after_step(report)
        rows = batch_records(
            [self.groups[i] for i in report.kept], self.decisions, step=self.step,
            n_samples_per_prompt=ctx.knobs.n_samples_per_prompt, global_batch_size=ctx.knobs.global_batch_size,
        )
        write_batch(self.paths, rows)
        if ctx.after_batch is not None:
            report.metrics.update(await ctx.after_batch(self.step, rows))
        write_step_metrics(ctx.paths, self.paths, self.step, report.metrics)
        if observer:
            observer.step_finished(report, self.progress())
        return report

    def _act(self, now: float, actions: list[Any]) -> None:
        """Carry out the step's actions: log each decision, start each group (aborts happen in ``_abort``)."""
        started: dict[int, list[int]] = {}  # wave -> groups started in it
        for action in actions:
            if type(action) is GroupDecision:
                self._log_decisions(now, [action])
            elif type(action) is Start:
                if action.index in self.groups:  # staged siblings: the rest of a group, not a new one
                    self._start(action)
                    self._event(now, "rest", index=action.index, siblings=list(action.siblings))
                    continue
                self._start(action)
                started.setdefault(action.wave, []).append(action.index)
        for wave, indices in started.items():
            self.waves[wave] = WaveStats(wave, submitted=len(indices))
            self._event(now, "wave", wave=wave, first_index=indices[0], last_index=indices[-1],
                        task_ids=[self.groups[i].task_id for i in indices], remaining=self.controller.remaining)
        if started and self.ctx.observer:
            self.ctx.observer.progressed(self.progress)

    def _start(self, start: Start) -> None:
        """One group's siblings as an asyncio task; it reports itself to the completion queue."""
        index, task_id = start.index, str(start.prompt)
        if index in self.groups:  # staged siblings: the rest of a group whose first K are back
            self._start_rest(start)
            return
        specs = [
            EpisodeSpec(
                task_id=task_id,
                rollout_id=f"s{self.step}-g{index}-r{i}",
                seed=episode_seed(self.ctx.seed, self.step, index, i),
                trace_path=self.paths.trace(index, i),
                group_index=index,
                sibling=i,
            )
            for i in start.siblings
        ]
        group = GroupRun(index=index, wave=start.wave, task_id=task_id, specs=specs)
        self.groups[index] = group
        first = len(specs) < self.ctx.knobs.n_samples_per_prompt  # a staged group's first K: triage once judged
        if first:
            self._first_stage.add(index)
        task = asyncio.create_task(
            run_group(group, self.ctx.runner, self.ctx.slots, on_finished=None if first else self._group_finished),
            name=f"shopsimrl-step{self.step}-group{index}",
        )
        self.completions.add(index, task)

    def _start_rest(self, start: Start) -> None:
        group, index = self.groups[start.index], start.index
        rest = [EpisodeSpec(task_id=group.task_id, rollout_id=f"s{self.step}-g{index}-r{i}",
                            seed=episode_seed(self.ctx.seed, self.step, index, i),
                            trace_path=self.paths.trace(index, i), group_index=index, sibling=i)
                for i in start.siblings]
        task = asyncio.create_task(
            run_rest(group, rest, self.ctx.runner, self.ctx.slots, on_finished=self._group_finished),
            name=f"shopsimrl-step{self.step}-group{index}-rest",
        )
        self.completions.add(index, task)

    def _group_finished(self, group: GroupRun) -> None:
        """Triage (and the Failure Analyst queue) before the group reaches the filter."""
        write_triage(self.paths, group, step=self.step, finished_at=self._now())
        if never_succeeded(group.episodes):
            append_failure_queue(self.ctx.paths, group, step=self.step)

    def _decide(self, now: float, finished: list[GroupRun]) -> None:
        """A batch of finished groups to the step; when the stop fires inside it, the decisions it took
        before (and the trigger, ``stopped_run``) are logged from what the controller hands back."""
        firsts = [g for g in finished if g.index in self._first_stage]
        if firsts:
            finished = [g for g in finished if g.index not in self._first_stage]
        try:
            actions = self.rollout.complete_batch([(g.index, g.verdict, _rewards(g)) for g in finished])
            self._act(now, actions)
            for group in sorted(firsts, key=lambda g: g.index):
                self._first_stage.discard(group.index)
                if self.rollout.done:
                    break  # the batch is full: this group is aborted with the rest
                self._act(now, self._first_stage_back(group))
        except TooManyTechnicalFailures as exc:
            self._log_decisions(now, list(exc.decisions))
            self.events[-1]["stopped_run"] = True
            raise

    def _first_stage_back(self, group: GroupRun) -> list[Any]:
        """A staged group's first K are back: the rest starts, or the group is decided after K (triage first)."""
        actions = self.rollout.first_stage(group.index, [ep.reward if ep.scored else None for ep in group.episodes])
        if any(type(a) is GroupDecision and a.index == group.index for a in actions):
            self._group_finished(group)
        return actions

    def _log_decisions(self, now: float, decisions: list[GroupDecision]) -> None:
        for d in decisions:
            group = self.groups[d.index]
            stats = self.waves[d.wave]
            stats.completed += 1
            if d.decision is Decision.ACCEPTED:
                stats.accepted += 1
            elif d.decision is Decision.FALLBACK:
                stats.fallback += 1
            elif d.decision is Decision.DROPPED:
                stats.dropped[d.reason] += 1  # type: ignore[index]
            else:
                stats.surplus += 1
            self.decisions[d.index] = d.decision.value
            self._event(now, "decision", batch=self.batches, task_id=group.task_id,
                        classification=group.classification, **d.as_dict())

    def _after_step(self, report: StepReport) -> None:
        """Selector metrics, the learning policy's update and the wave-timeline picture."""
        ctx = self.ctx
        fallback = set(report.fallback)
        informative = [self.groups[i].task_id for i in report.kept if i not in fallback]
        if not ctx.faithful:
            report.metrics.update(selector_step_metrics(
                ctx.source.pop_stats(), informative=len(informative),
                generated_episodes=sum(len(g.specs) for g in report.groups.values()),
                coverage=ctx.source.coverage(),
            ))
        if ctx.staging is not None:
            report.metrics.update(staged_step_metrics(self.rollout.stage_counts))
        if ctx.learner is not None:
            ctx.learner(informative)
        if ctx.timeline:
            from shopsimrl.rollout.timeline import write_wave_timeline

            write_wave_timeline(self.paths.root / "wave_timeline.png", self.events,
                                title=f"step {self.step}: wave timeline")

    async def _abort(self) -> None:
        """Cancel every in-flight group and wait until each episode has released its env session; then the
        step closes (the prompt source hears every result: held until now, so no prompt starts twice in a step)."""
        now = self._now()
        cancelled, undelivered = await self.completions.cancel_all()
        self.done = self.rollout.close()
        for index in self.done.aborted:
            self.waves[self.controller.wave_of(index)].aborted += 1
        self.wall_seconds = self._now()
        self._event(now, "abort", aborted=self.done.aborted, finished_not_judged=sorted(undelivered),
                    cancelled=len(cancelled), seconds=round(self.wall_seconds - now, 6))

    def _event(self, t: float, event: str, **fields: Any) -> None:
        self.events.append({"t": round(t, 6), "event": event, **fields})

    # -- views -------------------------------------------------------------------------------
    def progress(self) -> StepProgress:
        waves = sorted(self.waves.values(), key=lambda w: w.wave)
        for w in waves:
            w.running = 0
        for index in self.controller.in_flight:
            group = self.groups[index]
            if group.started:
                self.waves[group.wave].running += 1
        return StepProgress(
            step=self.step,
            elapsed=self._now(),
            target=self.controller.target,
            kept=len(self.controller.kept),
            remaining=self.controller.remaining,
            episodes_running=self.ctx.slots.in_use,
            waves=waves,
            state=self.controller.state,
        )

    def _report(self) -> StepReport:
        done = self.done
        assert done is not None, "the step reports once it is closed"
        report = StepReport(
            step=self.step,
            knobs=self.ctx.knobs,
            groups=self.groups,
            kept=done.kept,
            fallback=done.fallback,
            dropped=done.dropped,
            surplus=done.surplus,
            aborted=done.aborted,
            waves=done.waves,
            wall_seconds=self.wall_seconds,
            events=self.events,
        )
        report.metrics = step_metrics(report)
        return report

