"""The eval hooks: slime's eval rollout with ShopSim's eval keys, and unscored episodes out of its mean.

``--eval-function-path`` -> :func:`eval_rollout` (slime's eval, returned with our eval keys
as its metrics, the dict slime logs) and ``--custom-eval-rollout-log-function-path`` ->
:func:`drop_unscored_eval_episodes` ``(rollout_id, args, data, extra_metrics)``
(``slime/observability/rollout_metrics.py``, ``log_eval_rollout_data``) keeps unscored eval
episodes out of slime's ``eval/<dataset>`` mean.  Stable dotted paths:
``shopsimrl.slime_metrics.eval_rollout`` and ``shopsimrl.slime_metrics.drop_unscored_eval_episodes``.

slime's rollout module is imported on the first eval, never at import time.
"""

from __future__ import annotations

import logging
from typing import Any

from shopsimrl.defaults import HOOKS
from shopsimrl.sampling.verdict import is_scored
from shopsimrl.slime.samples import reward_key

log = logging.getLogger(__name__)

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
    # slime: only inside slime's process, never at import
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
