"""The async driver of one rollout step: the main job's pump around ``RolloutStep``.

:class:`shopsimrl.sampling.step.RolloutStep` decides everything (waves, the filter, the drop
rule, the fallback, the stop, the prompts); the driver does what slime's
``generate_rollout_async`` does around its loop: start the groups it names, await the first
finished group, take every other group already finished as the same batch, hand it to the step's
one event (``finished``) and carry out the actions it answers; at ``target`` kept groups, cancel
everything still in flight and wait for it (each episode releases its env session while it unwinds).

What is not the loop lives next door, so the loop reads in one screen: the step's clock and its groups
as tasks and their triage (``modelled.py``: the machine's clock, ``tasks.py``, or the modelled GPU clock), the event log (``events.py``), the live view's counters
(``progress.py``), the report (``report.py``) and what a finished step hands on (``handover.py``).
"""

from __future__ import annotations

import asyncio

from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.group import GroupRun
from shopsimrl.rollout.handover import hand_over
from shopsimrl.rollout.modelled import step_shell
from shopsimrl.rollout.outputs import write_events
from shopsimrl.rollout.progress import LiveProgress
from shopsimrl.rollout.report import StepReport, build_step_report
from shopsimrl.sampling import GroupDecision, TooManyTechnicalFailures, Verdict
from shopsimrl.sampling.step import Action, Completion, FirstStage, Start, StoppedEarly, StopRun, WaveOpened
from shopsimrl.sampling.verdict import unique_rollout_rewards


class StepDriver:
    """One rollout step: ``await StepDriver(ctx, k).run()`` returns its report, every output written."""

    def __init__(self, ctx: RunContext, step: int) -> None:
        self.ctx, self.step, self.paths = ctx, step, ctx.paths.step(step)
        self.rollout = ctx.rollout_step()
        self.log, self.tasks = step_shell(ctx, step, self.paths)  # the machine's clock, or the modelled one
        self.live = LiveProgress(step, self.rollout, self.tasks.groups, ctx.slots, self.log.now, ctx.observer)

    async def run(self) -> StepReport:
        self.ctx.guard.trace_dir = str(self.paths.root)  # the step folder: traces/ and triage/ are both in it
        self.log.begin(self.step, self.ctx.knobs, self.ctx.source)
        self.live.started()
        try:
            try:
                self._act(0.0, self.rollout.start())
                self.live.changed()
                while not self.rollout.done:
                    finished = await self.tasks.next_batch()
                    self.log.batches += 1
                    self._act(self.log.now(), self.rollout.finished([self._back(g) for g in finished]))
                    self.live.changed()
            except (TooManyTechnicalFailures, asyncio.CancelledError, OSError) as exc:
                self.log.stopped(exc)  # the guard, an interrupt (SIGINT / SIGTERM), an output not written
                raise
            finally:
                await self._abort()
                write_events(self.paths, self.log.events)
        except BaseException:
            self.live.finished(None)
            raise
        report = build_step_report(self.step, self.ctx.knobs, self.tasks.groups, self.rollout.close(),
                                   wall_seconds=self.log.wall_seconds, events=self.log.events)
        await hand_over(self.ctx, self.paths, report, stage_counts=self.rollout.stage_counts,
                        decisions=self.log.decisions)
        self.live.finished(report)
        return report

    def _act(self, now: float, actions: list[Action]) -> None:
        """Carry out the step's actions: start groups, log waves and decisions, triage a group decided after its
        first K before its decision; the stop is raised once the decisions before it are logged (aborts happen
        in ``_abort``).  The view is told after the whole list: one batch of first stages can open several
        refills, and until their starts are carried out the step's groups in flight include groups not started."""
        for action in actions:
            if isinstance(action, GroupDecision):
                self.live.decided(action)
                self.log.decision(now, self.tasks.groups[action.index], action)
            elif isinstance(action, Start):
                staged = self.rollout.runs_first_k(action.index)
                if self.tasks.start(action, first_stage=staged) is None:  # staged siblings: the rest of a group
                    self.log.rest(now, action)
            elif isinstance(action, WaveOpened):
                groups = [self.tasks.groups[i] for i in action.indices]
                self.live.opened(action.wave, len(groups))
                self.log.wave(now, action.wave, groups, remaining=action.remaining)
            elif isinstance(action, StoppedEarly):
                self.tasks.triage(self.tasks.groups[action.index])
            elif isinstance(action, StopRun):
                self.log.stop_trigger()
                raise action.error

    def _back(self, group: GroupRun) -> Completion | FirstStage:
        """What came back of a finished group: its first K siblings (staged), or the whole group."""
        if self.rollout.runs_first_k(group.index):
            return FirstStage(group.index, [e.reward if e.scored else None for e in group.episodes])
        return group.index, group.verdict, _rewards(group)

    async def _abort(self) -> None:
        """Cancel every group in flight and wait until each has unwound; then the step closes (the prompt
        source hears every result: held until now, so no prompt starts twice in a step)."""
        now = self.log.now()
        cancelled, undelivered = await self.tasks.cancel_all()
        done = self.rollout.close()
        self.live.aborted(done.aborted)
        self.log.abort(now, done.aborted, finished_not_judged=sorted(undelivered), cancelled=len(cancelled))


def _rewards(group: GroupRun) -> list[float] | None:
    """A finished group's rewards per unique rollout, for the prompt source; ``None``: not scored."""
    return None if group.verdict is Verdict.TECHNICAL else list(unique_rollout_rewards(group.samples()).values())
