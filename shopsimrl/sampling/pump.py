"""The one pump around :class:`~shopsimrl.sampling.step.RolloutStep`: every shell's loop, written once.

A shell (the main job's driver, slime's rollout function, the simulator, ``replay``,
``replay_recorded``, the selector check) owns time, tasks and outputs; the step owns every
decision.  :func:`pump` (and :func:`apump`, its ``async`` twin) carries out each action the step
answers, and asks the shell only for what it alone knows:

- :meth:`Shell.start`: start a group (a :class:`~shopsimrl.sampling.step.Start`: its prompt and
  which siblings);
- :meth:`Shell.next_finished`: the groups that finished next, together (``None``: the shell has
  nothing more, and the step stops there, as on an interrupt);
- :meth:`Shell.measure` / :meth:`Shell.measure_first_k`: what came back of a finished group
  (whole: its verdict and rewards; staged: its first ``K`` siblings' rewards);
- :meth:`Shell.cancel`: cancel groups still in flight (:class:`~shopsimrl.sampling.step.AbortRest`);
- :meth:`Shell.now`: the clock.

:class:`Hooks` holds the optional observe hooks (no-ops; the pump calls those a shell defines): a
shell records what it needs (a wave opened, a decision, a group decided after its first ``K``, the
stop, the end).

How a step runs::

    start()                    the first wave, carried out at t = 0
    while the step is not done:
        next_finished()        measured (measure / measure_first_k) and handed to step.finished()
        carry out the actions  Start, WaveOpened, GroupDecision, StoppedEarly: the shell's and its hooks';
                               AbortRest: cancel, then close(); StopRun: raise its error
    return close()             the StepDone

On any exception (the consecutive-failure stop, an interrupt, an error of the shell), the shell's
``failed`` hook hears it first; then every group still in flight is cancelled, the step closes
(``closed`` hears the outcome) and the exception propagates.  So a pumped step always ends with every
group it started either measured or cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from shopsimrl.sampling.controller import ControllerStateError, GroupDecision
from shopsimrl.sampling.guard import TooManyTechnicalFailures
from shopsimrl.sampling.step import (
    AbortRest,
    Action,
    Completion,
    FirstStage,
    RolloutStep,
    Start,
    StepDone,
    StoppedEarly,
    StopRun,
    WaveOpened,
)
from shopsimrl.sampling.verdict import Verdict

__all__ = ["AsyncShell", "Hooks", "Shell", "apump", "pump"]


class Hooks:
    """The optional observe hooks of a shell, as no-ops: a shell subclasses this and overrides what it records (a
    shell that does not subclass it is asked only for the hooks it defines).  ``t``: the shell's clock when the
    event that led to the action was handed to the step (0 for the step's start)."""

    def opened(self, wave: WaveOpened, t: float) -> None:
        """A wave (or adaptive refill) opened: its groups' :meth:`start` were called just before."""

    def decided(self, decision: GroupDecision, t: float) -> None:
        """The step decided a group (kept, fallback, dropped, surplus)."""

    def stopped_early(self, index: int, t: float) -> None:
        """Staged group ``index`` is decided after its first ``K``: its decision follows, its rest never runs."""

    def stopping(self, error: TooManyTechnicalFailures, t: float) -> None:
        """The consecutive-failure stop fired on the last decision heard; ``error`` is raised next."""

    def carried_out(self, t: float) -> None:
        """The actions of one event (the start, or one batch) are carried out."""

    def failed(self, exc: BaseException) -> None:
        """The step ends on ``exc`` (the stop, an interrupt, an error): heard before the groups in flight are
        cancelled."""

    def closed(self, done: StepDone, t: float) -> None:
        """The step closed (``t``: when its groups in flight began to be cancelled)."""


class _Required(Protocol):
    """What only a shell knows, sync or async alike (:class:`Hooks`: what it may observe besides)."""

    def now(self) -> float:
        """The shell's clock (seconds since the step began)."""
        ...

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        """Start ``start.siblings`` of group ``start.index`` on ``start.prompt`` (``first_stage``: a staged group's
        first ``K``, measured with :meth:`measure_first_k` when back; a staged rest joins its group; ``t``: as for
        the hooks)."""
        ...

    def measure(self, index: int) -> tuple[Verdict, Sequence[float] | None]:
        """A group back whole: its verdict and its rewards per unique rollout (``None``: unscored, or not the
        shell's to give)."""
        ...

    def measure_first_k(self, index: int) -> Sequence[float | None]:
        """A staged group's first ``K`` siblings are back: their rewards (``None``: unscored)."""
        ...


class Shell(_Required, Protocol):
    """A synchronous shell: :func:`pump` drives it."""

    def next_finished(self) -> Sequence[int] | None:
        """The groups that finished next, together, in the order the shell saw them (``None``: nothing more)."""
        ...

    def cancel(self, indices: tuple[int, ...]) -> None:
        """Cancel these groups: every group still running, and any back but never decided (the batch that
        filled or stopped the step left them); none of them comes back."""
        ...


class AsyncShell(_Required, Protocol):
    """An ``async`` shell: :func:`apump` drives it (its waits and its cancel are awaited)."""

    async def next_finished(self) -> Sequence[int] | None:
        """As :meth:`Shell.next_finished`, awaited."""
        ...

    async def cancel(self, indices: tuple[int, ...]) -> None:
        """As :meth:`Shell.cancel`, awaited (until every cancelled group has unwound)."""
        ...


class _Carrier:
    """The part of the pump that is neither sync nor async: measure a batch, carry out actions."""

    def __init__(self, step: RolloutStep, shell: _Required, in_order: bool) -> None:
        self.step, self.shell, self.in_order = step, shell, in_order
        self.closed: StepDone | None = None
        self.cancelled = False

    def measured(self, indices: Sequence[int]) -> list[Completion | FirstStage]:
        """What came back of each finished group: its first ``K`` (staged), or the whole group."""
        items: list[Completion | FirstStage] = []
        for index in indices:
            if self.step.runs_first_k(index):
                items.append(FirstStage(index, self.shell.measure_first_k(index)))
            else:
                verdict, rewards = self.shell.measure(index)
                items.append((index, verdict, rewards))
        return items

    def advance(self, indices: Sequence[int] | None, t: float) -> AbortRest | None:
        """The groups that finished next, at ``t`` (``None``: the shell has nothing more, so the step stops): their
        actions carried out; the abort, once the step is done."""
        if indices is None:
            return self.step.stop()
        return self.carry(self.step.finished(self.measured(indices), in_order=self.in_order), t)

    def carry(self, actions: list[Action], t: float) -> AbortRest | None:
        """Carry out ``actions`` but the abort, which is returned for the pump to await; raise a stop's error."""
        abort: AbortRest | None = None
        shell = self.shell
        for action in actions:
            if isinstance(action, Start):
                shell.start(action, first_stage=self.step.runs_first_k(action.index), t=t)
            elif isinstance(action, WaveOpened):
                self._tell("opened", action, t)
            elif isinstance(action, GroupDecision):
                self._tell("decided", action, t)
            elif isinstance(action, StoppedEarly):
                self._tell("stopped_early", action.index, t)
            elif isinstance(action, AbortRest):
                abort = action
            elif isinstance(action, StopRun):
                self._tell("stopping", action.error, t)
                raise action.error
            else:  # pragma: no cover - the step's actions are the ones above
                raise TypeError(f"unknown action {action!r}")
        self._tell("carried_out", t)
        return abort

    def close(self, t: float) -> StepDone:
        done = self.closed = self.step.close()
        self._tell("closed", done, t)
        return done

    def fail(self, exc: BaseException) -> tuple[AbortRest, float] | None:
        """The step ends on ``exc``: tell the shell; what is left to cancel (``None``: the step already closed)."""
        self._tell("failed", exc)
        if self.closed is not None:
            return None
        return self.step.stop(), self.shell.now()

    def close_after_failure(self, t: float) -> None:
        """Close a step that failed; a step the controller cannot close any more (a broken protocol) stays so,
        and the failure propagates as it is."""
        try:
            self.close(t)
        except ControllerStateError:
            pass

    def _tell(self, name: str, *args: object) -> None:
        """Call the shell's hook ``name``, when it has one."""
        hook: Callable[..., None] | None = getattr(self.shell, name, None)
        if hook is not None:
            hook(*args)


def pump(step: RolloutStep, shell: Shell, *, in_order: bool = False) -> StepDone:
    """Run ``step`` with ``shell`` to its end and return its outcome (module docstring).  ``in_order``: each batch
    is decided in the order the shell gave it (slime's own loop), not in submission order."""
    run = _Carrier(step, shell, in_order)
    try:
        abort = run.carry(step.start(), 0.0)
        while abort is None:
            indices = shell.next_finished()
            abort = run.advance(indices, shell.now())
        t = shell.now()
        run.cancelled = True
        shell.cancel(abort.indices)
        return run.close(t)
    except BaseException as exc:
        left = run.fail(exc)
        if left is not None:
            abort, t = left
            if not run.cancelled:
                shell.cancel(abort.indices)
            run.close_after_failure(t)
        raise


async def apump(step: RolloutStep, shell: AsyncShell, *, in_order: bool = False) -> StepDone:
    """:func:`pump` for an ``async`` shell: the same actions, its waits and its cancel awaited."""
    run = _Carrier(step, shell, in_order)
    try:
        abort = run.carry(step.start(), 0.0)
        while abort is None:
            indices = await shell.next_finished()
            abort = run.advance(indices, shell.now())
        t = shell.now()
        run.cancelled = True
        await shell.cancel(abort.indices)
        return run.close(t)
    except BaseException as exc:
        left = run.fail(exc)
        if left is not None:
            abort, t = left
            if not run.cancelled:
                await shell.cancel(abort.indices)
            run.close_after_failure(t)
        raise
