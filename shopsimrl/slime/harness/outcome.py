"""A check's outcome: PASS and FAIL only on evidence; NOT RUN when its inputs are missing; N/A when it does not apply.

A check that found nothing to compare (its leg failed, slime trained no step) has proved
nothing: it is NOT RUN, with the reason, never PASS.  ``shopsimrl slime check`` exits 0
only when every check is PASS or N/A.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class Status(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "NOT RUN"
    NOT_APPLICABLE = "N/A"


@dataclass(frozen=True)
class Outcome:
    status: Status
    problems: tuple[str, ...] = ()  # FAIL: the mismatches found
    reason: str = ""  # NOT RUN / N/A: why
    note: str = ""  # PASS: what it found beyond the pass (e.g. how early feedback arrived)

    @classmethod
    def of(cls, problems: Sequence[str]) -> Outcome:
        """PASS when the check compared its evidence and found nothing wrong, else FAIL with what it found."""
        return cls(Status.FAIL, tuple(problems)) if problems else cls(Status.PASS)

    @classmethod
    def not_run(cls, reason: str) -> Outcome:
        return cls(Status.NOT_RUN, reason=reason)

    @classmethod
    def not_applicable(cls, reason: str) -> Outcome:
        return cls(Status.NOT_APPLICABLE, reason=reason)

    @property
    def holds(self) -> bool:
        """Nothing to fix: passed, or does not apply here."""
        return self.status in (Status.PASS, Status.NOT_APPLICABLE)
