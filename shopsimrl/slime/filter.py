"""The group filter slime calls after each group completes on its own loop (``--dynamic-sampling-filter-path``).

A thin translation for slime's own ``generate_rollout_async``: the verdict, the filter's answer and the
consecutive-failure guard are the sampling core's (``sampling.group_verdict``, ``filter_output``, the guard);
this module hands slime the answer as slime's own ``DynamicFilterOutput``.  Its stable dotted path is
``shopsimrl.slime_runtime.fully_scored_group_filter`` (the seed's).

Our rollout function (:mod:`shopsimrl.slime.rollout_fn`) does not call it: there the step judges each group
from its samples (:mod:`shopsimrl.slime.batch`) and feeds the guard itself.

slime's class is imported on the first call, never at import time; without slime there is no answer to give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from shopsimrl.errors import InfraFailure
from shopsimrl.sampling import FilterOutput, filter_output, group_verdict
from shopsimrl.sampling.verdict import group_label
from shopsimrl.slime.settings import slime_settings
from shopsimrl.slime.state import hook_state


def fully_scored_group_filter(args: Any, group: Sequence[Any], **kwargs: Any) -> Any:
    """docs/dynamic-sampling.md §2: technical -> drop (never a fallback); zero-std -> drop unless short; else keep.

    Feeds the verdict to the process-wide consecutive-failure guard, which raises ``TooManyTechnicalFailures``
    (naming the trace dir) when the streak reaches ``args.shopsim_max_consecutive_failed_groups``.  Returns
    slime's ``DynamicFilterOutput``.
    """
    settings = slime_settings(args)
    verdict = group_verdict(group, settings.reward_key)
    state = hook_state()
    with state.lock:
        state.guard_for(settings.max_consecutive_failed_groups, settings.trace_dir).observe(verdict, group_label(group))
    return to_dynamic_filter_output(filter_output(verdict))


class SlimeFilterOutputUnavailable(InfraFailure, RuntimeError):
    """slime's ``DynamicFilterOutput`` cannot be imported: refuse rather than return anything else (slime reads any
    other return value as keep=True)."""


def _dynamic_filter_output_cls() -> type:
    state = hook_state()
    with state.lock:
        if state.filter_output_cls is None:
            try:
                # slime: only inside slime's process, never at import
                from slime.rollout.filter_hub.base_types import DynamicFilterOutput as slime_cls
            except ImportError as exc:
                # slime's call_dynamic_filter wraps anything that is not its own DynamicFilterOutput
                # as keep=<that object>, which is truthy: any other answer would keep every group,
                # technical ones included.  Fail at the first call instead.
                raise SlimeFilterOutputUnavailable(
                    "slime.rollout.filter_hub.base_types.DynamicFilterOutput cannot be imported "
                    f"({type(exc).__name__}: {exc}); the filter refuses to run, since slime would read any other "
                    "return value as keep=True. Run it inside slime, with a slime whose generate_rollout_async calls "
                    "should_drop_dynamic_filter_output."
                ) from exc
            if "keep_when_insufficient" not in {f.name for f in fields(slime_cls)}:
                raise SlimeFilterOutputUnavailable(
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
