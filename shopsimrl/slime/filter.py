"""The group filter slime calls after each group completes (``--dynamic-sampling-filter-path``).

A thin translation: the verdict, the filter's answer and the consecutive-failure guard
are the sampling core's (``sampling.group_verdict``, ``filter_output``, the guard); this
module hands slime the answer as slime's own ``DynamicFilterOutput``.  Its stable dotted
path is ``shopsimrl.slime_runtime.fully_scored_group_filter`` (the seed's).

slime's class is imported on the first call, never at import time.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from shopsimrl.errors import InfraFailure
from shopsimrl.sampling import FilterOutput, filter_output, group_verdict
from shopsimrl.sampling.verdict import group_label
from shopsimrl.slime.samples import max_consecutive_failed_groups, reward_key, trace_dir
from shopsimrl.slime.state import hook_state


def fully_scored_group_filter(args: Any, group: Sequence[Any], **kwargs: Any) -> Any:
    """docs/dynamic-sampling.md §2: technical -> drop (never a fallback); zero-std -> drop unless short; else keep.

    On slime's own loop, feeds the verdict to the process-wide consecutive-failure guard, which raises
    ``TooManyTechnicalFailures`` (naming the trace dir) when the streak reaches
    ``args.shopsim_max_consecutive_failed_groups``; under our rollout function the step feeds that guard
    instead (``stop_decided_by_step``).  Returns slime's ``DynamicFilterOutput``.
    """
    verdict = group_verdict(group, reward_key(args))
    state = hook_state()
    with state.lock:
        if not state.stop_decided_by_step:
            state.guard_for(max_consecutive_failed_groups(args), trace_dir(args)).observe(verdict, group_label(group))
    return to_dynamic_filter_output(filter_output(verdict))


class DynamicFilterOutput(FilterOutput):
    """Stand-in for slime's class of the same name, only where slime is not installed at all (same fields)."""


class SlimeFilterOutputUnavailable(InfraFailure, RuntimeError):
    """slime is there, but its ``DynamicFilterOutput`` is not: refuse rather than keep every group."""


def _slime_present() -> bool:
    """True inside a slime process (slime loaded) or wherever a ``slime`` package is installed."""
    if "slime" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("slime") is not None
    except (ImportError, ValueError):
        return True  # a broken `slime` entry is still a slime we cannot use


def _dynamic_filter_output_cls() -> type:
    state = hook_state()
    with state.lock:
        if state.filter_output_cls is None:
            try:
                # slime: only inside slime's process, never at import
                from slime.rollout.filter_hub.base_types import DynamicFilterOutput as slime_cls
            except ImportError as exc:
                if _slime_present():
                    # slime's call_dynamic_filter wraps anything that is not its own DynamicFilterOutput
                    # as keep=<that object>, which is truthy: a stand-in would keep every group,
                    # technical ones included.  Fail at the first call instead.
                    raise SlimeFilterOutputUnavailable(
                        "slime is loaded but slime.rollout.filter_hub.base_types.DynamicFilterOutput cannot be "
                        f"imported ({type(exc).__name__}: {exc}); the filter refuses to run, since slime would "
                        "read any other return value as keep=True. Use a slime whose generate_rollout_async "
                        "calls should_drop_dynamic_filter_output."
                    ) from exc
                state.filter_output_cls = DynamicFilterOutput
            else:
                if "keep_when_insufficient" not in {f.name for f in fields(slime_cls)}:
                    raise RuntimeError(
                        "this slime's DynamicFilterOutput has no keep_when_insufficient field: the zero-std fallback "
                        "(docs/dynamic-sampling.md §3) needs a slime whose generate_rollout_async calls should_drop_dynamic_filter_output"
                    )
                state.filter_output_cls = slime_cls
        return state.filter_output_cls


def to_dynamic_filter_output(output: FilterOutput) -> Any:
    """The sampling core's answer as slime's own class (slime type-checks it)."""
    return _dynamic_filter_output_cls()(
        keep=output.keep, reason=output.reason, keep_when_insufficient=output.keep_when_insufficient
    )
