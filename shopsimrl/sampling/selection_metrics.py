"""The selection's step figures, under ``rollout/shopsim/selector/``, whatever the selector.

The selectors themselves are :mod:`~shopsimrl.sampling.source` (one factory),
:mod:`~shopsimrl.sampling.evidence` (what every rule knows) and one file per rule
(:mod:`~shopsimrl.sampling.order`, :mod:`~shopsimrl.sampling.skip`, :mod:`~shopsimrl.sampling.spread`).
"""

from __future__ import annotations

#: W&B-style key prefix of the selector's figures (under the project's rollout/shopsim/ namespace).
SELECTOR_PREFIX = "rollout/shopsim/selector/"


def selector_step_metrics(
    stats: dict[str, float], *, informative: int, generated_episodes: int, coverage: float
) -> dict[str, float]:
    """One step's selector figures from ``pop_stats()`` of the selector and the step's outcome.

    ``informative``: groups trained with reward spread; ``generated_episodes``: episodes
    submitted (aborted ones included, as they were paid for).  A mean over nothing is omitted.
    """
    metrics = {
        SELECTOR_PREFIX + "prompts_chosen": float(stats["chosen"]),
        SELECTOR_PREFIX + "prompts_explored": float(stats["explored"]),
        SELECTOR_PREFIX + "prompts_skipped": float(stats["skipped"]),
        SELECTOR_PREFIX + "prompts_rechecked": float(stats["rechecked"]),
        SELECTOR_PREFIX + "prompts_released": float(stats["released"]),
        SELECTOR_PREFIX + "coverage": float(coverage),
    }
    for key in ("cluster_coverage_min", "cluster_coverage_median", "clusters_tried"):  # with cluster labels only
        if key in stats:
            metrics[SELECTOR_PREFIX + key] = float(stats[key])
    metrics.update(forecast_metrics(stats))
    if stats["chosen"]:
        metrics[SELECTOR_PREFIX + "predicted_zero_spread_mean"] = stats["predicted_zero_spread_sum"] / stats["chosen"]
    if generated_episodes:
        metrics[SELECTOR_PREFIX + "informative_per_1k_episodes"] = 1000.0 * informative / generated_episodes
    return metrics


#: The ``forecast`` rule's calibration keys, under the selector's prefix.
FORECAST_PREFIX = SELECTOR_PREFIX + "forecast/"


def forecast_metrics(stats: dict[str, float]) -> dict[str, float]:
    """The ``forecast`` rule's step figures (none for another rule): its skips, whether its gate is open and its
    Brier skill over the base rate, and over the step's groups of rarely-seen prompts its mean predicted and
    observed zero-spread rate, its Brier score and the base rate's (so users can see whether to trust it)."""
    if "forecast_groups" not in stats:
        return {}
    out = {FORECAST_PREFIX + "skipped": float(stats["forecast_skipped"]),
           FORECAST_PREFIX + "ready": float(stats["forecast_ready"]), FORECAST_PREFIX + "skill": float(stats["forecast_skill"]),
           FORECAST_PREFIX + "groups": float(stats["forecast_groups"])}
    groups = stats["forecast_groups"]
    if groups:
        out[FORECAST_PREFIX + "predicted_zero_spread"] = stats["forecast_predicted_sum"] / groups
        out[FORECAST_PREFIX + "observed_zero_spread"] = stats["forecast_observed_sum"] / groups
        out[FORECAST_PREFIX + "brier"] = stats["forecast_brier_sum"] / groups
        out[FORECAST_PREFIX + "base_brier"] = stats["forecast_base_brier_sum"] / groups
    return out
