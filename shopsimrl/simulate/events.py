"""A simulated step's events, in the driver's event schema.

``step_start``, ``wave``, ``decision`` and ``abort``, each with its simulated time ``t``: the
same wave-timeline picture draws a simulated step and a real one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from shopsimrl.sampling.controller import GroupDecision
from shopsimrl.sampling.step import Start


class StepEvents:
    """Collects one step's events in ``events``, in the order they happen."""

    def __init__(self, step: int) -> None:
        self.events: list[dict[str, Any]] = [{"t": 0.0, "event": "step_start", "step": step}]

    def wave(self, t: float, starts: Sequence[Start], remaining: int) -> None:
        """New groups opened at one instant: a wave, or an adaptive refill."""
        self.events.append({"t": t, "event": "wave", "wave": starts[0].wave, "first_index": starts[0].index,
                            "last_index": starts[-1].index, "task_ids": [str(s.prompt) for s in starts],
                            "remaining": remaining})

    def decision(self, t: float, prompt: Hashable, decision: GroupDecision) -> None:
        self.events.append({"t": t, "event": "decision", "task_id": str(prompt), **decision.as_dict()})

    def abort(self, t: float, aborted: list[int]) -> None:
        self.events.append({"t": t, "event": "abort", "aborted": aborted})
