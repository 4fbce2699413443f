"""The async driver of one rollout step: waves of groups in, the controller's decisions out.

It runs :class:`shopsimrl.sampling.WaveController` the way slime's
``generate_rollout_async`` runs its loop: submit whole waves while the controller
``needs_wave`` (``remaining < target``); await the first finished group, take every other group
already finished as the same batch, hand the batch to the controller; stop at
``target`` kept groups, then cancel everything still in flight and wait for it
(each episode releases its env session while it unwinds).

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
from shopsimrl.rollout.tasks import TaskSampler
from shopsimrl.sampling import (
    DROP_REASONS,
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    ConsecutiveFailureGuard,
    Decision,
    GroupDecision,
    SamplingKnobs,
    State,
    TooManyTechnicalFailures,
    Verdict,
    WaveController,
)
from shopsimrl.sampling.adaptive import AdaptiveWaves
from shopsimrl.sampling.selector import PromptSelector, selector_step_metrics
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
    """What the steps of one run share: the guard's streak, the sampler's epoch position, the slots."""

    knobs: SamplingKnobs
    runner: EpisodeRunner
    sampler: TaskSampler
    guard: ConsecutiveFailureGuard
    slots: EpisodeSlots
    paths: RunPaths
    seed: int = 0
    observer: StepObserver | None = None
    clock: Callable[[], float] = time.perf_counter
    # prompt selection (opt-in; None keeps the faithful TaskSampler order and slime's whole waves)
    selector: PromptSelector | None = None
    adaptive: AdaptiveWaves | None = None
    learner: Callable[[list[str]], None] | None = None  # trained on these tasks' informative groups
    # a learner trained on (step, batch rows) before the step's metrics are written; its metrics join the row
    after_batch: Callable[[int, list[dict[str, Any]]], Awaitable[dict[str, float]]] | None = None
    timeline: bool = False  # draw each step's wave timeline into its folder


class StepDriver:
    """One rollout step.  ``await StepDriver(ctx, k).run()`` returns its report (outputs written)."""

    def __init__(self, ctx: RunContext, step: int) -> None:
        self.ctx = ctx
        self.step = step
        self.paths = ctx.paths.step(step)
        knobs = ctx.knobs
        self.controller = WaveController(  # the run's guard carries max_consecutive_failed_groups
            knobs.rollout_batch_size, knobs.over_sampling_batch_size, guard=ctx.guard
        )
        self.groups: dict[int, GroupRun] = {}
        self.waves: dict[int, WaveStats] = {}
        self.events: list[dict[str, Any]] = []
        self.completions: CompletionQueue[int, GroupRun] = CompletionQueue()
        self.decisions: dict[int, str] = {}
        self.batches = 0
        self.wall_seconds = 0.0
        self._t0 = 0.0
        self._q: dict[int, float] = {}  # adaptive waves: each in-flight group's predicted spread probability
        self._feedback: list[tuple[str, Decision, list[float] | None]] = []  # for the selector, at step end

    def _now(self) -> float:
        return self.ctx.clock() - self._t0

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> StepReport:
        ctx = self.ctx
        ctx.guard.trace_dir = str(self.paths.root)  # the step folder: traces/ and triage/ are both in it
        ctx.sampler.begin_step()
        self._t0 = ctx.clock()
        observer = ctx.observer
        if observer:
            observer.step_started(self.step, self.controller.target)
        self._event(0.0, "step_start", step=self.step, knobs=ctx.knobs.as_dict(), sampler=ctx.sampler.state())
        try:
            try:
                self._submit(0.0)
                while not self.controller.done:
                    batch = await self.completions.next_batch()
                    now = self._now()
                    self.batches += 1
                    self._decide(now, _results(batch))
                    self._submit(now)
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

    def _submit(self, now: float) -> None:
        """Open whole waves when the controller ``needs_wave`` (or adaptive refills)."""
        controller = self.controller
        selector = self.ctx.selector
        if self.ctx.adaptive is not None and selector is not None:
            new, task_ids = self._refill(selector)
        else:
            if not controller.needs_wave:
                return
            new = controller.submit()
            task_ids = self.ctx.sampler.take(len(new)) if selector is None else [str(t) for t in selector.next_prompts(len(new))]
        if not new:
            return
        n = self.ctx.knobs.n_samples_per_prompt
        by_wave: dict[int, list[int]] = {}
        for index, task_id in zip(new, task_ids):
            wave = controller.wave_of(index)
            by_wave.setdefault(wave, []).append(index)
            specs = [
                EpisodeSpec(
                    task_id=task_id,
                    rollout_id=f"s{self.step}-g{index}-r{i}",
                    seed=episode_seed(self.ctx.seed, self.step, index, i),
                    trace_path=self.paths.trace(index, i),
                    group_index=index,
                    sibling=i,
                )
                for i in range(n)
            ]
            group = GroupRun(index=index, wave=wave, task_id=task_id, specs=specs)
            self.groups[index] = group
            task = asyncio.create_task(
                run_group(group, self.ctx.runner, self.ctx.slots, on_finished=self._group_finished),
                name=f"shopsimrl-step{self.step}-group{index}",
            )
            self.completions.add(index, task)
        for wave, indices in by_wave.items():
            self.waves[wave] = WaveStats(wave, submitted=len(indices))
            self._event(now, "wave", wave=wave, first_index=indices[0], last_index=indices[-1],
                        task_ids=[self.groups[i].task_id for i in indices], remaining=controller.remaining)
        if self.ctx.observer:
            self.ctx.observer.progressed(self.progress)

    def _refill(self, selector: PromptSelector) -> tuple[range, list[str]]:
        """Adaptive waves: add the groups the refill rule asks for, each prompt chosen as it is added."""
        controller = self.controller
        picks = self.ctx.adaptive.choose(  # type: ignore[union-attr]
            len(controller.kept), [self._q[i] for i in controller.in_flight], selector.next_prompt, controller.submitted
        )
        if not picks:
            return range(0), []
        new = controller.refill(len(picks))
        for index, (_, q) in zip(new, picks):
            self._q[index] = q
        return new, [str(task_id) for task_id, _ in picks]

    def _group_finished(self, group: GroupRun) -> None:
        """Triage (and the Failure Analyst queue) before the group reaches the filter."""
        write_triage(self.paths, group, step=self.step, finished_at=self._now())
        if never_succeeded(group.episodes):
            append_failure_queue(self.ctx.paths, group, step=self.step)

    def _decide(self, now: float, finished: list[GroupRun]) -> None:
        try:
            decisions = self.controller.complete_batch([(g.index, g.verdict) for g in finished])  # type: ignore[misc]
        except TooManyTechnicalFailures as exc:
            self._decisions_before_stop(now, finished, exc)
            raise
        self._log_decisions(now, decisions)

    def _decisions_before_stop(self, now: float, finished: list[GroupRun], exc: TooManyTechnicalFailures) -> None:
        """The stop fired inside a batch: log the decisions the controller took before it, then the
        trigger itself (a technical group, dropped; ``stopped_run``).  ``remaining`` and ``kept`` are
        the controller's values at the stop."""
        c = self.controller
        trigger = int(exc.groups[-1])
        placed = {**{i: (Decision.DROPPED, r) for r, ids in c.dropped.items() for i in ids},
                  **{i: (Decision.ACCEPTED, None) for i in c.kept},
                  **{i: (Decision.FALLBACK, REASON_ZERO_STD) for i in c.fallback},
                  **{i: (Decision.SURPLUS, None) for i in c.surplus}}
        decided = []
        for group in sorted(finished, key=lambda g: g.index):
            decision, reason = (Decision.DROPPED, REASON_TECHNICAL) if group.index == trigger else placed[group.index]
            decided.append(GroupDecision(group.index, c.wave_of(group.index), group.verdict, decision, reason,
                                         c.remaining, len(c.kept)))
            if group.index == trigger:
                break
        self._log_decisions(now, decided)
        self.events[-1]["stopped_run"] = True

    def _log_decisions(self, now: float, decisions: list[Any]) -> None:
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
            self._tell_selector(group, d.decision, d.verdict)
            self._event(now, "decision", batch=self.batches, task_id=group.task_id,
                        classification=group.classification, **d.as_dict())

    def _tell_selector(self, group: GroupRun, decision: Decision, verdict: Verdict) -> None:
        """Keep a finished group's result for the selector (told at step end, see ``_flush_feedback``)."""
        if self.ctx.selector is None:
            return
        rewards = None if verdict is Verdict.TECHNICAL else list(unique_rollout_rewards(group.samples()).values())
        self._feedback.append((group.task_id, decision, rewards))

    def _flush_feedback(self) -> None:
        """At step end: the selector learns from every scored group; prompts with no trained result go back.

        Held until the step ends so that a prompt finished early in a step stays out of the
        pool until then: a step never starts the same task twice, as with ``TaskSampler``.
        """
        selector = self.ctx.selector
        if selector is None:
            return
        for task_id, decision, rewards in self._feedback:
            selector.settle(task_id, rewards, surplus=decision is Decision.SURPLUS)
        self._feedback.clear()

    def _after_step(self, report: StepReport) -> None:
        """Selector metrics, the learning policy's update and the wave-timeline picture."""
        ctx = self.ctx
        fallback = set(report.fallback)
        informative = [self.groups[i].task_id for i in report.kept if i not in fallback]
        if ctx.selector is not None:
            report.metrics.update(selector_step_metrics(
                ctx.selector.pop_stats(), informative=len(informative),
                generated_episodes=len(report.groups) * ctx.knobs.n_samples_per_prompt,
                coverage=ctx.selector.coverage(),
            ))
        if ctx.learner is not None:
            ctx.learner(informative)
        if ctx.timeline:
            from shopsimrl.rollout.timeline import write_wave_timeline

            write_wave_timeline(self.paths.root / "wave_timeline.png", self.events,
                                title=f"step {self.step}: wave timeline")

    async def _abort(self) -> None:
        """Cancel every in-flight group and wait until each episode has released its env session."""
        now = self._now()
        cancelled, undelivered = await self.completions.cancel_all()
        aborted = self.controller.abort()
        for index in aborted:
            self.waves[self.controller.wave_of(index)].aborted += 1
            if self.ctx.selector is not None:
                self.ctx.selector.release(self.groups[index].task_id)
        self._flush_feedback()
        self.wall_seconds = self._now()
        self._event(now, "abort", aborted=aborted, finished_not_judged=sorted(undelivered),
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
        c = self.controller
        report = StepReport(
            step=self.step,
            knobs=self.ctx.knobs,
            groups=self.groups,
            kept=list(c.kept),
            fallback=list(c.fallback),
            dropped={r: list(ids) for r, ids in c.dropped.items()},
            surplus=list(c.surplus),
            aborted=list(c.aborted),
            waves=c.waves,
            wall_seconds=self.wall_seconds,
            events=self.events,
        )
        report.metrics = step_metrics(report)
        return report

