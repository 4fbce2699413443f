"""slime's metric hooks for ShopSim: the SPEC §7 keys, computed by the standalone runtime's function.

slime calls, once per rollout step and in this order (``slime/rollout/sglang_rollout.py``,
``slime/ray/rollout.py``):

1. ``--rollout-all-samples-process-path`` -> :func:`record_generated_rollout_groups`
   ``(args, all_samples, data_source)`` with every *completed* group of the step (kept,
   dropped or surplus; aborted ones never complete).  We keep their outcomes in the
   hook state: slime gives the next hook no way to see them.
2. ``--custom-rollout-log-function-path`` -> :func:`enrich_rollout_metrics`
   ``(rollout_id, args, samples, rollout_extra_metrics, rollout_time)`` with the trained
   samples and slime's metric dict (which holds its ``rollout/dynamic_filter/drop_<reason>``
   counts).  We add our keys to that dict *in place* and return ``False``: a falsy return
   tells slime to go on with its default logging of the same dict, so W&B (or whatever
   slime logs to) receives our keys with slime's; this module never calls a logger itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from shopsimrl.sampling import DROP_REASONS, dynamic_filter_drop_key, rollout_step_metrics
from shopsimrl.sampling.verdict import iter_samples
from shopsimrl.slime.samples import group_outcome, group_outcomes, reward_key
from shopsimrl.slime.state import hook_state

log = logging.getLogger(__name__)


def record_generated_rollout_groups(args: Any, all_samples: Sequence[Sequence[Any]], data_source: Any = None) -> None:
    """Remember the outcomes of every completed group of this step (for :func:`enrich_rollout_metrics`)."""
    hook_state().put_completed_groups(group_outcomes(all_samples, reward_key(args)))


def enrich_rollout_metrics(
    rollout_id: int,
    args: Any,
    samples: Sequence[Any],
    rollout_extra_metrics: dict[str, Any] | None,
    rollout_time: float,
) -> bool:
    """Add the SPEC §7 keys to slime's metric dict; return False so slime still logs it."""
    if rollout_extra_metrics is None:
        log.warning("rollout %s: slime passed no metric dict; the ShopSim metrics of this step are not logged", rollout_id)
        return False
    key = reward_key(args)
    trained = list(iter_samples(samples))
    completed = hook_state().take_completed_groups()
    if completed is None:
        log.warning(
            "rollout %s: no completed groups were recorded (is --rollout-all-samples-process-path "
            "shopsimrl.slime_metrics.record_generated_rollout_groups set?); counting the trained groups only",
            rollout_id,
        )
        completed = _trained_groups(trained, key)
    drop_counts = {reason: int(rollout_extra_metrics.get(dynamic_filter_drop_key(reason), 0)) for reason in DROP_REASONS}
    trained_groups = {s.group_index for s in trained}
    rollout_extra_metrics.update(rollout_step_metrics(completed, trained_groups, drop_counts))
    return False


def _trained_groups(trained: list[Any], key: str) -> list[Any]:
    by_group: dict[int, list[Any]] = {}
    for sample in trained:
        by_group.setdefault(sample.group_index, []).append(sample)
    return [group_outcome(group, key) for group in by_group.values()]
