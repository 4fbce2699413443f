"""The consecutive-failure stop (docs/dynamic-sampling.md §2.1): too many technical groups in a row end the run.

slime gives the filter no state, so this counter is the one piece of state that
must live across filter calls (and across rollout steps); it is an explicit
object, owned by whoever runs the loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from shopsimrl.defaults import DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS
from shopsimrl.errors import InfraFailure
from shopsimrl.sampling.knobs import validate_failure_limit
from shopsimrl.sampling.verdict import Verdict


class TooManyTechnicalFailures(InfraFailure, RuntimeError):
    """Raised when ``limit`` technical groups arrived in a row.

    ``decisions``: when a ``WaveController`` raised it, every decision of the batch the stop cut
    short, in submission order, up to and including the trigger (a technical group, dropped);
    the rest of that batch was never judged.
    """

    def __init__(self, message: str, *, count: int, groups: list[str], trace_dir: str | None) -> None:
        super().__init__(message)
        self.count = count
        self.groups = groups
        self.trace_dir = trace_dir
        self.decisions: tuple[Any, ...] = ()  # GroupDecision (the controller sets them)


class ConsecutiveFailureGuard:
    """Counts technical groups in a row; any scored group resets the count."""

    def __init__(self, limit: int = DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS, *, trace_dir: str | None = None) -> None:
        validate_failure_limit(limit)
        self.limit = limit
        self.trace_dir = trace_dir
        self.count = 0
        self._recent: deque[str] = deque(maxlen=limit)

    def observe(self, verdict: Verdict, group: object = None) -> None:
        """Record one filtered group; raise ``TooManyTechnicalFailures`` when the streak reaches the limit."""
        if verdict is not Verdict.TECHNICAL:
            if self.count:
                self.count = 0
                self._recent.clear()
            return
        self.count += 1
        self._recent.append(str(group) if group is not None else "?")
        if self.count >= self.limit:
            groups = list(self._recent)
            where = (
                f"their traces and triage are under {self.trace_dir} (read each trace's 'error' field)"
                if self.trace_dir
                else "look at these groups' traces (the 'error' field says which stage failed)"
            )
            raise TooManyTechnicalFailures(
                f"{self.count} technical groups in a row (shopsim_max_consecutive_failed_groups={self.limit}): "
                f"groups {', '.join(groups)} could not be scored; {where}. The environment or the policy server "
                f"is probably down or misconfigured.",
                count=self.count,
                groups=groups,
                trace_dir=self.trace_dir,
            )

    def reset(self) -> None:
        self.count = 0
        self._recent.clear()

    def state_dict(self) -> dict[str, Any]:
        """The streak, as plain data: a resumed run continues it (``--resume``)."""
        return {"count": self.count, "recent": list(self._recent)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        count, recent = state.get("count"), state.get("recent")
        if type(count) is not int or count < 0 or not isinstance(recent, list):
            raise ValueError(f"a failure streak is a count and its groups, got {dict(state)!r}")
        self.count = count
        self._recent = deque((str(g) for g in recent), maxlen=self.limit)
