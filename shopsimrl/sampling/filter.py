"""The filter's answer for a verdict and slime's drop rule (docs/dynamic-sampling.md §2-§3).

``FilterOutput`` has the fields of slime's ``DynamicFilterOutput``; the slime
adapter converts it.  ``should_drop`` is slime's
``should_drop_dynamic_filter_output``: the only place the fallback lives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from shopsimrl.sampling.verdict import Verdict

REASON_TECHNICAL = "shopsim_unscored_technical_group"
REASON_ZERO_STD = "shopsim_zero_std_group"
DROP_REASONS = (REASON_TECHNICAL, REASON_ZERO_STD)


@dataclass(frozen=True, slots=True)
class FilterOutput:
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


KEEP = FilterOutput(keep=True)
TECHNICAL_DROP = FilterOutput(keep=False, reason=REASON_TECHNICAL, keep_when_insufficient=False)
ZERO_STD_DROP = FilterOutput(keep=False, reason=REASON_ZERO_STD, keep_when_insufficient=True)

#: The filter's answer per verdict, the one place it is written (read-only; the controller's hot path reads it).
FILTER_OUTPUTS: Mapping[Verdict, FilterOutput] = MappingProxyType(
    {Verdict.VARIED: KEEP, Verdict.ZERO_STD: ZERO_STD_DROP, Verdict.TECHNICAL: TECHNICAL_DROP}
)


def filter_output(verdict: Verdict) -> FilterOutput:
    """Technical: drop, never a fallback.  Zero-std: drop unless the batch runs short.  Varied: keep."""
    return FILTER_OUTPUTS[verdict]


def should_drop(output: FilterOutput, remaining: int, target: int) -> bool:
    """slime's rule: keep normally; admit a ``keep_when_insufficient`` group while ``remaining <= target``."""
    if output.keep:
        return False
    if output.keep_when_insufficient and remaining <= target:
        return False
    return True
