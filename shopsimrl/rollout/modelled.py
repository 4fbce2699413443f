"""The step's clock, the shell's concern: the machine's, or a modelled GPU clock that never sleeps.

On the machine's clock the step sees groups in the order this machine finishes them
(``tasks.GroupTasks``).  On the modelled clock (``--clock modelled``) every group a step starts is
played to its end for real (the order they really finish in is irrelevant), each episode gets
its modelled solo seconds from its turns, pages and tokens (``gputime.TimeModel``), and a
discrete-event clock (``gputime.SharedThroughput``: the engines' shared throughput) decides which
group finishes next in modelled time.  So groups finish, are decided and are aborted in modelled
order; at the stop, each episode still in flight is cut at the modelled moment: its modelled
seconds and the env steps of the turns it finished by then are its cost; its group never comes
back (its traces on disk are whole: it was played to the end).  The same seed and options give
the same run.  :func:`step_shell` is the one seam: the driver asks it for the step's clock and groups.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from shopsimrl.rollout.completions import results
from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.events import EventLog
from shopsimrl.rollout.gputime import EpisodeTime, SharedThroughput, TimeModel
from shopsimrl.rollout.group import EpisodeMeter, GroupRun, join_rest, run_group
from shopsimrl.rollout.outputs import StepPaths
from shopsimrl.rollout.tasks import GroupTasks
from shopsimrl.sampling.step import Start

Job = tuple[int, int]
"""(group index, its first sibling in this start): a whole group, a staged group's first ``K``, or its rest."""


@dataclass
class _Job:
    """A start on the modelled clock: the group (or a staged rest's part) and its episodes' times."""

    part: GroupRun
    rest: bool  # a staged group's rest: joins its group when it finishes
    first_stage: bool  # a staged group's first K: triaged only once decided
    left: int = 0  # episodes still running on the clock
    started_at: float = 0.0  # modelled seconds since the step began
    started_virtual: float = 0.0  # the clock's virtual time then
    times: tuple[EpisodeTime, ...] = ()


class ModelledTasks(GroupTasks):
    """The step's groups on the modelled clock: started as real tasks, delivered in modelled-time order."""

    def __init__(self, ctx: RunContext, step: int, paths: StepPaths, model: TimeModel) -> None:
        super().__init__(ctx, step, paths, self.now)
        self.model = model
        self.clock = SharedThroughput(model.capacity)
        self.playing: dict[Job, asyncio.Task[GroupRun]] = {}  # started, not yet on the clock
        self.jobs: dict[Job, _Job] = {}  # on the clock, or about to be

    def now(self) -> float:
        """Modelled seconds since the step began."""
        return self.clock.now

    def start(self, start: Start, *, first_stage: bool = False) -> GroupRun | None:
        index, ctx = start.index, self.ctx
        specs = self.specs(start)
        rest = index in self.groups
        if rest:
            group, part = None, GroupRun(index=index, wave=start.wave, task_id=str(start.prompt), specs=specs)
        else:
            group = part = self.groups[index] = GroupRun(index=index, wave=start.wave, task_id=str(start.prompt),
                                                         specs=specs, weight=ctx.source.weight(start.prompt))
        job = (index, start.siblings[0])
        self.jobs[job] = _Job(part, rest=rest, first_stage=first_stage)
        name = f"shopsimrl-step{self.step}-group{index}" + ("-rest" if rest else "")
        self.playing[job] = asyncio.create_task(run_group(part, ctx.runner, ctx.slots), name=name)  # triage: later
        return group

    async def _play(self) -> None:
        """Wait until every group started at this modelled instant has really finished; put them on the clock."""
        if not self.playing:
            return
        playing = sorted(self.playing.items())
        await asyncio.wait([task for _job, task in playing])
        self.playing.clear()
        results([(job, task) for job, task in playing])  # an exception of one is raised, every one retrieved
        for job, _task in playing:
            self._on_clock(job, self.jobs[job])

    def _on_clock(self, job: Job, state: _Job) -> None:
        part = state.part
        state.times = tuple(self.model.episode(spec.seed, ep.turns, meter.page_chars, ep.completion_tokens)
                            for spec, meter, ep in zip(part.specs, part.meters, part.episodes))
        state.started_at, state.started_virtual, state.left = self.clock.now, self.clock.virtual, len(state.times)
        for sibling, time in enumerate(state.times):
            self.clock.start((job, sibling), time.solo_seconds)
            _modelled(part.meters[sibling], seconds=0.0, tokens=0.0)

    async def next_batch(self) -> list[GroupRun]:
        """The groups (or first stages) that finish next in modelled time, all at that instant."""
        await self._play()
        finished: list[Job] = []
        while not finished:
            now, keys = self.clock.next()
            for job, sibling in keys:  # type: ignore[misc]
                state = self.jobs[job]
                time = state.times[sibling]
                _modelled(state.part.meters[sibling], seconds=now - state.started_at, tokens=time.tokens)
                state.left -= 1
                if not state.left:
                    finished.append(job)
        delivered = []
        for job in sorted(finished):
            state = self.jobs.pop(job)
            if state.rest:
                delivered.append(join_rest(self.groups[job[0]], state.part, on_finished=self.triage))
            else:
                if not state.first_stage:
                    self.triage(state.part)
                delivered.append(state.part)
        return delivered

    async def cancel_all(self) -> tuple[list[int], list[int]]:
        """Abort every group in flight at the modelled moment: each episode is cut there.

        Groups started at this very instant (an interrupt) are cancelled for real; they did no modelled work."""
        for task in self.playing.values():
            task.cancel()
        if self.playing:
            await asyncio.gather(*self.playing.values(), return_exceptions=True)
        unplayed = set(self.playing)
        self.playing.clear()
        now, virtual = self.clock.now, self.clock.virtual
        cancelled = []
        for job, state in sorted(self.jobs.items()):
            for sibling, meter in enumerate(state.part.meters):
                time = state.times[sibling] if job not in unplayed else EpisodeTime()
                done = virtual - state.started_virtual
                meter.env_steps = min(meter.env_steps, time.turns_by(done)) if job not in unplayed else 0
                _modelled(meter, seconds=now - state.started_at if job not in unplayed else 0.0, tokens=0.0)
            if not state.rest:  # as a cancelled task leaves it: no episodes, no verdict (a rest leaves its group so)
                state.part.episodes, state.part.verdict, state.part.classification = [], None, None
            self.clock.cancel([(job, s) for s in range(len(state.times))])
            cancelled.append(job[0])
        self.jobs.clear()
        return sorted(set(cancelled)), []


def _modelled(meter: EpisodeMeter, *, seconds: float, tokens: float) -> None:
    """The meter holds modelled seconds (and response tokens) from now on, never the machine's."""
    meter.started, meter.seconds, meter.tokens = None, seconds, tokens


def step_shell(ctx: RunContext, step: int, paths: StepPaths) -> tuple[EventLog, GroupTasks]:
    """The step's clock (its event log reads it) and its groups: the machine's clock, or the modelled one."""
    if ctx.time_model is None:
        log = EventLog(ctx.clock)
        return log, GroupTasks(ctx, step, paths, log.now)
    tasks = ModelledTasks(ctx, step, paths, ctx.time_model)
    return EventLog(tasks.now), tasks
