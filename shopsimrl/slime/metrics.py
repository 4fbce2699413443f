"""The rollout step's metric hooks: the docs/dynamic-sampling.md §7 keys in slime's log.

slime calls, once per rollout step and in this order (``slime/rollout/sglang_rollout.py``,
``slime/ray/rollout.py``):

1. ``--rollout-all-samples-process-path`` -> :func:`record_generated_rollout_groups`
   ``(args, all_samples, data_source)`` with every *completed* group of the step (kept,
   dropped or surplus; aborted ones never complete).  We keep their outcomes in the
   hook state: slime gives the next hook no way to see them.
2. ``--custom-rollout-log-function-path`` -> :func:`enrich_rollout_metrics`
   ``(rollout_id, args, samples, rollout_extra_metrics, rollout_time)`` with the trained
   samples and slime's metric dict (which holds its ``rollout/dynamic_filter/drop_<reason>``
   counts).  We add our keys to that dict *in place* (with our data source, also the
   concentration figures of the trained prompts, ``rollout/shopsim/concentration/*``) and return ``False``: a falsy return
   tells slime to go on with its default logging of the same dict, so W&B (or whatever
   slime logs to) receives our keys with slime's; this module never calls a logger itself.

The keys are the standalone runtime's (``sampling.rollout_step_metrics``).  Stable dotted
paths: ``shopsimrl.slime_metrics.record_generated_rollout_groups`` and
``shopsimrl.slime_metrics.enrich_rollout_metrics``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from shopsimrl.defaults import HOOKS
from shopsimrl.sampling import DROP_REASONS, Verdict, dynamic_filter_drop_key, rollout_step_metrics
from shopsimrl.sampling.selection_metrics import SELECTOR_PREFIX
from shopsimrl.sampling.verdict import iter_samples, reward_spread_verdict, unique_rollout_rewards
from shopsimrl.slime.samples import group_outcome, group_outcomes, reward_key
from shopsimrl.slime.state import hook_state

log = logging.getLogger(__name__)


def record_generated_rollout_groups(args: Any, all_samples: Sequence[Sequence[Any]], data_source: Any = None) -> None:
    """Remember the outcomes of every completed group of this step (for :func:`enrich_rollout_metrics`)."""
    hook_state().put_completed_groups(group_outcomes(all_samples, reward_key(args)))
    # slime's own generate_rollout passes the data source's bound ``get_samples`` here, its custom rollout
    # functions (ours included) the data source itself: either way, the data source is found
    source = getattr(data_source, "__self__", data_source)
    if hasattr(source, "rollout_ended"):  # ours: told by the log hook when the rollout ends (data_source.py)
        state = hook_state()
        with state.lock:
            state.rollout_source = source
    record_groups = getattr(source, "record_groups", None)  # our SelectorDataSource (--data-source-path)
    if record_groups is not None:
        metrics = record_groups(args, all_samples)
        state = hook_state()
        with state.lock:
            state.selector_metrics = metrics
            state.selector_source = source


def enrich_rollout_metrics(
    rollout_id: int,
    args: Any,
    samples: Sequence[Any],
    rollout_extra_metrics: dict[str, Any] | None,
    rollout_time: float,
) -> bool:
    """Add the docs/dynamic-sampling.md §7 keys to slime's metric dict; return False so slime still logs it.

    Last, it tells our data source that rollout ``rollout_id`` ended: its state as of now is what ``save(rollout_id)``
    writes, even once the next rollout has drawn (``train_async.py``; ``StateAtRolloutEnd`` in data_source.py)."""
    try:
        return _enrich(rollout_id, args, samples, rollout_extra_metrics)
    finally:
        state = hook_state()
        with state.lock:
            source, state.rollout_source = state.rollout_source, None
        if source is not None:
            source.rollout_ended(rollout_id)


def _enrich(rollout_id: int, args: Any, samples: Sequence[Any], rollout_extra_metrics: dict[str, Any] | None) -> bool:
    if rollout_extra_metrics is None:
        log.warning("rollout %s: slime passed no metric dict; the ShopSim metrics of this step are not logged", rollout_id)
        return False
    key = reward_key(args)
    trained = list(iter_samples(samples))
    completed = hook_state().take_completed_groups()
    if completed is None:
        log.warning(
            "rollout %s: no completed groups were recorded (is --rollout-all-samples-process-path %s set?); "
            "counting the trained groups only",
            rollout_id,
            HOOKS["--rollout-all-samples-process-path"],
        )
        completed = _trained_groups(trained, key)
    drop_counts = {reason: int(rollout_extra_metrics.get(dynamic_filter_drop_key(reason), 0)) for reason in DROP_REASONS}
    trained_groups = {s.group_index for s in trained}
    rollout_extra_metrics.update(rollout_step_metrics(completed, trained_groups, drop_counts))
    state = hook_state()
    with state.lock:
        selector_metrics, state.selector_metrics = state.selector_metrics, None
        source = state.selector_source
    if source is not None:  # the concentration figures: the trained groups' prompts, told to the data source
        by_prompt = {s.group_index: (s.metadata or {}).get("task_id", s.prompt) for s in trained}
        rollout_extra_metrics.update(source.trained_metrics(list(by_prompt.values()), rollout_id))
    if selector_metrics:
        rollout_extra_metrics.update(selector_metrics)
        chosen = selector_metrics.get(SELECTOR_PREFIX + "prompts_chosen", 0.0)
        if chosen:
            n = int(getattr(args, "n_samples_per_prompt", 0) or 0) or max(1, len(trained) // max(1, len(trained_groups)))
            by_group: dict[Any, list[Any]] = {}
            for sample in trained:
                by_group.setdefault(sample.group_index, []).append(sample)
            informative = sum(_has_spread(group, key) for group in by_group.values())
            rollout_extra_metrics[SELECTOR_PREFIX + "informative_per_1k_episodes"] = 1000.0 * informative / (chosen * n)
    return False


def _has_spread(group: list[Any], key: str) -> bool:
    """The group's unique-rollout rewards differ (the spread rule of ``sampling/verdict.py``)."""
    return reward_spread_verdict(unique_rollout_rewards(group, key).values()) is Verdict.VARIED


def _trained_groups(trained: list[Any], key: str) -> list[Any]:
    by_group: dict[int, list[Any]] = {}
    for sample in trained:
        by_group.setdefault(sample.group_index, []).append(sample)
    return [group_outcome(group, key) for group in by_group.values()]

