"""The async driver of one rollout step: the main job's shell around ``RolloutStep``, pumped by ``apump``.

:class:`shopsimrl.sampling.step.RolloutStep` decides everything (waves, the filter, the drop
rule, the fallback, the stop, the prompts), and :func:`shopsimrl.sampling.pump.apump` carries out
its actions; the driver does what slime's ``generate_rollout_async`` does around its loop: start the
groups the step names, await the first finished group, take every other group already finished as
the same batch; at ``target`` kept groups (the step's ``AbortRest``), or on a stop or an interrupt,
cancel everything still in flight and wait for it (each episode releases its env session while it
unwinds).

What is not the loop lives next door, so the loop reads in one screen: the step's clock and its groups
as tasks and their triage (``modelled.py``: the machine's clock, ``tasks.py``, or the modelled GPU clock), the event log (``events.py``), the live view's counters
(``progress.py``), the report (``report.py``) and what a finished step hands on (``handover.py``).
"""

from __future__ import annotations

from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.group import GroupRun
from shopsimrl.rollout.handover import hand_over
from shopsimrl.rollout.modelled import step_shell
from shopsimrl.rollout.outputs import write_events
from shopsimrl.rollout.progress import LiveProgress
from shopsimrl.rollout.report import StepReport, build_step_report
from shopsimrl.sampling import GroupDecision, TooManyTechnicalFailures, Verdict
from shopsimrl.sampling.pump import Hooks, apump
from shopsimrl.sampling.step import Start, StepDone, WaveOpened
from shopsimrl.sampling.verdict import unique_rollout_rewards


class StepDriver(Hooks):
    """One rollout step: ``await StepDriver(ctx, k).run()`` returns its report, every output written.

    The step's shell (:class:`~shopsimrl.sampling.pump.AsyncShell`): :func:`~shopsimrl.sampling.pump.apump` carries
    out the step's actions; the driver starts groups as tasks, hands back the groups that finished, cancels what
    the abort names, and logs (the event log, the live view) what its hooks hear."""

    def __init__(self, ctx: RunContext, step: int) -> None:
        self.ctx, self.step, self.paths = ctx, step, ctx.paths.step(step)
        self.rollout = ctx.rollout_step()
        self.log, self.tasks = step_shell(ctx, step, self.paths)  # the machine's clock, or the modelled one
        self.live = LiveProgress(step, self.rollout, self.tasks.groups, ctx.slots, self.log.now, ctx.observer)
        self._back: dict[int, GroupRun] = {}  # the groups of the last batch, by index
        self._cancelled: tuple[list[int], list[int]] = ([], [])  # the abort: (cancelled, finished not judged)

    async def run(self) -> StepReport:
        self.ctx.guard.trace_dir = str(self.paths.root)  # the step folder: traces/ and triage/ are both in it
        self.log.begin(self.step, self.ctx.knobs, self.ctx.source)
        self.live.started()
        try:
            try:
                done = await apump(self.rollout, self)
            finally:
                write_events(self.paths, self.log.events)
        except BaseException:
            self.live.finished(None)
            raise
        report = build_step_report(self.step, self.ctx.knobs, self.tasks.groups, done,
                                   wall_seconds=self.log.wall_seconds, events=self.log.events)
        await hand_over(self.ctx, self.paths, report, stage_counts=self.rollout.stage_counts,
                        decisions=self.log.decisions)
        self.live.finished(report)
        return report

    # -- the shell: what only the driver knows ----------------------------------------------------------------
    def now(self) -> float:
        return self.log.now()

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        if self.tasks.start(start, first_stage=first_stage) is None:  # staged siblings: the rest of a group
            self.log.rest(t, start)

    async def next_finished(self) -> list[int]:
        """Await the first finished group; every other group already finished is the same batch."""
        finished = await self.tasks.next_batch()
        self.log.batches += 1
        self._back = {group.index: group for group in finished}
        return [group.index for group in finished]

    def measure(self, index: int) -> tuple[Verdict, list[float] | None]:
        group = self._back[index]
        return group.verdict, _rewards(group)  # type: ignore[return-value]  # a whole group back has its verdict

    def measure_first_k(self, index: int) -> list[float | None]:
        return [e.reward if e.scored else None for e in self._back[index].episodes]

    async def cancel(self, indices: tuple[int, ...]) -> None:
        """Cancel every group in flight and wait until each has unwound (each episode releases its env session);
        then the step closes (the selector hears every result: held until now, so no prompt starts twice in
        a step)."""
        self._cancelled = await self.tasks.cancel_all()

    # -- the shell's hooks: the event log and the live view ---------------------------------------------------
    def opened(self, wave: WaveOpened, t: float) -> None:
        groups = [self.tasks.groups[i] for i in wave.indices]
        self.live.opened(wave.wave, len(groups))
        self.log.wave(t, wave.wave, groups, remaining=wave.remaining)

    def decided(self, decision: GroupDecision, t: float) -> None:
        self.live.decided(decision)
        self.log.decision(t, self.tasks.groups[decision.index], decision)

    def stopped_early(self, index: int, t: float) -> None:
        self.tasks.triage(self.tasks.groups[index])  # triaged before its decision is logged

    def stopping(self, error: TooManyTechnicalFailures, t: float) -> None:
        self.log.stop_trigger()

    def carried_out(self, t: float) -> None:
        """The view is told after the whole list: one batch of first stages can open several refills, and until
        their starts are carried out the step's groups in flight include groups not started."""
        self.live.changed()

    def failed(self, exc: BaseException) -> None:
        self.log.stopped(exc)  # the guard, an interrupt (SIGINT / SIGTERM), an output not written

    def closed(self, done: StepDone, t: float) -> None:
        cancelled, undelivered = self._cancelled
        self.live.aborted(done.aborted)
        self.log.abort(t, done.aborted, finished_not_judged=sorted(undelivered), cancelled=len(cancelled))


def _rewards(group: GroupRun) -> list[float] | None:
    """A finished group's rewards per unique rollout, for the selector; ``None``: not scored."""
    return None if group.verdict is Verdict.TECHNICAL else list(unique_rollout_rewards(group.samples()).values())
