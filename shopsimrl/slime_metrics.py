"""slime's metric hooks for ShopSim: the docs/dynamic-sampling.md §7 keys, computed by the standalone runtime's function.

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

For evaluation, ``--eval-function-path`` -> :func:`eval_rollout` (slime's eval, returned with our
eval keys as its metrics, the dict slime logs) and
``--custom-eval-rollout-log-function-path`` -> :func:`drop_unscored_eval_episodes`
``(rollout_id, args, data, extra_metrics)`` (``slime/observability/rollout_metrics.py``,
``log_eval_rollout_data``) keeps unscored eval episodes out of slime's ``eval/<dataset>`` mean.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from shopsimrl.sampling import DROP_REASONS, dynamic_filter_drop_key, rollout_step_metrics
from shopsimrl.sampling.knobs import ZERO_STD_EPSILON
from shopsimrl.sampling.selector import SELECTOR_PREFIX
from shopsimrl.sampling.verdict import is_scored, iter_samples, unique_rollout_rewards
from shopsimrl.slime.defaults import HOOKS
from shopsimrl.slime.samples import group_outcome, group_outcomes, reward_key
from shopsimrl.slime.state import hook_state

log = logging.getLogger(__name__)


def record_generated_rollout_groups(args: Any, all_samples: Sequence[Sequence[Any]], data_source: Any = None) -> None:
    """Remember the outcomes of every completed group of this step (for :func:`enrich_rollout_metrics`)."""
    hook_state().put_completed_groups(group_outcomes(all_samples, reward_key(args)))
    # slime's own generate_rollout passes the data source's bound ``get_samples`` here, its custom rollout
    # functions (ours included) the data source itself: either way, the data source is found
    source = getattr(data_source, "__self__", data_source)
    record_groups = getattr(source, "record_groups", None)  # our SelectorDataSource (--data-source-path)
    if record_groups is not None:
        metrics = record_groups(args, all_samples)
        state = hook_state()
        with state.lock:
            state.selector_metrics = metrics


def enrich_rollout_metrics(
    rollout_id: int,
    args: Any,
    samples: Sequence[Any],
    rollout_extra_metrics: dict[str, Any] | None,
    rollout_time: float,
) -> bool:
    """Add the docs/dynamic-sampling.md §7 keys to slime's metric dict; return False so slime still logs it."""
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
    state = hook_state()
    with state.lock:
        selector_metrics, state.selector_metrics = state.selector_metrics, None
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
    rewards = list(unique_rollout_rewards(group, key).values())
    return max(rewards) - min(rewards) > ZERO_STD_EPSILON


def _trained_groups(trained: list[Any], key: str) -> list[Any]:
    by_group: dict[int, list[Any]] = {}
    for sample in trained:
        by_group.setdefault(sample.group_index, []).append(sample)
    return [group_outcome(group, key) for group in by_group.values()]


#: slime's ``--eval-function-path`` for :func:`eval_rollout` (the launcher sets it).
EVAL_FUNCTION_PATH = HOOKS["--eval-function-path"]


def eval_scored_metrics(args: Any, data: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``eval/<dataset>/shopsim_unscored_count`` and ``.../shopsim_scored_rate`` for each dataset with samples."""
    key = reward_key(args)
    metrics: dict[str, float] = {}
    for name, entry in data.items():
        samples = entry.get("samples")
        if samples is None:
            continue
        scored = [is_scored(sample, key) for sample in samples]
        metrics[f"eval/{name}/shopsim_unscored_count"] = scored.count(False)
        metrics[f"eval/{name}/shopsim_scored_rate"] = scored.count(True) / len(samples) if samples else 0.0
    return metrics


def eval_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = True) -> Any:
    """``--eval-function-path``: slime's own eval rollout, returned with the ShopSim eval keys as its metrics.

    slime's ``RolloutManager.eval`` hands the eval output's ``metrics`` to the eval log hook
    and logs that dict; slime's ``eval_rollout`` returns none, so without this the hook's keys
    would go into a dict nobody logs.  The episodes and their order are slime's.
    """
    from slime.rollout import sglang_rollout
    from slime.rollout.base_types import RolloutFnEvalOutput

    if not evaluation:
        raise ValueError(f"{EVAL_FUNCTION_PATH} is slime's --eval-function-path, not its --rollout-function-path")
    output = sglang_rollout.generate_rollout(args, rollout_id, data_source, evaluation=True)
    data = getattr(output, "data", output)
    metrics = {**(getattr(output, "metrics", None) or {}), **eval_scored_metrics(args, data)}
    return RolloutFnEvalOutput(data=data, metrics=metrics)


def drop_unscored_eval_episodes(
    rollout_id: int, args: Any, data: dict[str, dict[str, Any]], extra_metrics: dict[str, Any] | None = None
) -> bool:
    """``--custom-eval-rollout-log-function-path``: keep unscored eval episodes out of slime's eval mean.

    slime's ``log_eval_rollout_data`` logs ``eval/<dataset>`` as the mean of
    ``data[dataset]["rewards"]``, where an unscored episode (env or SGLang failure) would
    count as reward 0.  This removes unscored episodes from ``rewards``, ``truncated`` and
    ``samples`` in place (whole prompts of ``n_samples_per_eval_prompt`` episodes when
    ``--log-passrate`` needs complete groups), adds ``eval/<dataset>/shopsim_unscored_count``
    and ``eval/<dataset>/shopsim_scored_rate`` to slime's metric dict, and returns False so
    slime logs as usual.  slime passes the eval rollout's ``metrics`` as that dict, which is
    None for slime's own eval rollout: :func:`eval_rollout` (``--eval-function-path``) returns one.  A dataset with no scored episode left is removed from ``data``
    (slime would divide by zero); its two ShopSim keys are still logged.
    """
    if extra_metrics is None:
        log.warning("eval %s: slime passed no metric dict, so the eval keys are not logged: set --eval-function-path "
                    "%s (the launcher does)", rollout_id, EVAL_FUNCTION_PATH)
    metrics = extra_metrics if extra_metrics is not None else {}
    metrics.update(eval_scored_metrics(args, data))
    key = reward_key(args)
    group_size = int(getattr(args, "n_samples_per_eval_prompt", 1) or 1) if getattr(args, "log_passrate", False) else 1
    for name in list(data):
        entry = data[name]
        samples = entry.get("samples")
        if samples is None:
            log.warning("eval %s: dataset %s has no samples; its unscored episodes cannot be told apart", rollout_id, name)
            continue
        scored = [is_scored(sample, key) for sample in samples]
        keep = [all(scored[start : start + group_size]) for start in range(0, len(samples), group_size)]
        kept = [i for i in range(len(samples)) if keep[i // group_size]]
        if not kept:
            log.warning("eval %s: no scored episode in dataset %s; eval/%s is not logged", rollout_id, name, name)
            del data[name]
            continue
        for field in ("rewards", "truncated", "samples"):
            if field in entry:
                entry[field] = [entry[field][i] for i in kept]
    return False
