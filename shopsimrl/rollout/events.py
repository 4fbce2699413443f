"""The step's event log (``events.jsonl``): what the driver did and when, in one record per line.

Times are seconds since the step began (the run's clock), rounded to the microsecond.  The wave
timeline is drawn from it, the simulator writes the same schema and the tests rebuild a step from
it, so the schema is written here, once.  It also keeps each group's decision, which its batch
rows carry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from shopsimrl.rollout.group import GroupRun
from shopsimrl.sampling import GroupDecision, SamplingKnobs, TooManyTechnicalFailures
from shopsimrl.sampling.order import SeedOrder
from shopsimrl.sampling.source import Selector
from shopsimrl.sampling.step import Start


class EventLog:
    """One step's events, in the order they happened; ``decisions``: each judged group's decision."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.events: list[dict[str, Any]] = []
        self.decisions: dict[int, str] = {}  # submission index -> decision value
        self.batches = 0  # batches of finished groups so far: a decision names the one it came in
        self.wall_seconds = 0.0  # set by abort(): the step's length, cancellations included
        self._t0 = 0.0

    def now(self) -> float:
        """Seconds since the step began."""
        return self.clock() - self._t0

    def event(self, t: float, event: str, **fields: Any) -> None:
        self.events.append({"t": round(t, 6), "event": event, **fields})

    def begin(self, step: int, knobs: SamplingKnobs, source: Selector) -> None:
        """The step begins now; the seed order's position is logged, so a step can be replayed from it."""
        self._t0 = self.clock()
        position = {"sampler": source.position()} if isinstance(source, SeedOrder) else {}
        self.event(0.0, "step_start", step=step, knobs=knobs.as_dict(), **position)

    def wave(self, t: float, wave: int, groups: Sequence[GroupRun], remaining: int) -> None:
        """Groups opened together (a wave, or an adaptive refill)."""
        self.event(t, "wave", wave=wave, first_index=groups[0].index, last_index=groups[-1].index,
                   task_ids=[g.task_id for g in groups], remaining=remaining)

    def rest(self, t: float, start: Start) -> None:
        """Staged siblings: the rest of a group whose first ``K`` are back."""
        self.event(t, "rest", index=start.index, siblings=list(start.siblings))

    def decision(self, t: float, group: GroupRun, d: GroupDecision) -> None:
        self.decisions[d.index] = d.decision.value
        self.event(t, "decision", batch=self.batches, task_id=group.task_id, classification=group.classification,
                   **d.as_dict())

    def stop_trigger(self) -> None:
        """The decision just logged is the one the consecutive-failure stop fired on."""
        self.events[-1]["stopped_run"] = True

    def stopped(self, exc: BaseException) -> None:
        """Why the step ended before its batch was full: the guard, an interrupt, or a write that failed."""
        if isinstance(exc, TooManyTechnicalFailures):
            self.event(self.now(), "stopped", reason="too_many_technical_failures", message=str(exc),
                       groups=[int(g) for g in exc.groups])
        elif isinstance(exc, asyncio.CancelledError):  # SIGINT / SIGTERM, or cancelled by the caller
            self.event(self.now(), "stopped", reason="interrupted",
                       signal=str(exc.args[0]) if exc.args and exc.args[0] else None)
        elif isinstance(exc, OSError):  # disk full, ...: the step is incomplete
            self.event(self.now(), "stopped", reason="write_failed", errno=exc.errno,
                       message=f"{type(exc).__name__}: {exc}")

    def abort(self, t: float, aborted: list[int], *, finished_not_judged: list[int], cancelled: int) -> None:
        """The groups still in flight at ``t`` were cancelled and have unwound: the step's wall time ends here."""
        self.wall_seconds = self.now()
        self.event(t, "abort", aborted=aborted, finished_not_judged=finished_not_judged, cancelled=cancelled,
                   seconds=round(self.wall_seconds - t, 6))
