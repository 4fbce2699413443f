"""Stable dotted paths for slime's metric hooks (rollout step and eval).

slime loads each hook by the dotted path in its argv (``slime.utils.misc.load_function``),
and scripts and saved launch configurations hold these paths; so they stay here while the
code lives in :mod:`shopsimrl.slime`.  This module only re-exports.

==========================================  ==========================================  ====================================
stable path (this module)                   slime flag                                  implementation
==========================================  ==========================================  ====================================
``record_generated_rollout_groups``         ``--rollout-all-samples-process-path``      :mod:`shopsimrl.slime.metrics`
``enrich_rollout_metrics``                  ``--custom-rollout-log-function-path``      :mod:`shopsimrl.slime.metrics`
``drop_unscored_eval_episodes``             ``--custom-eval-rollout-log-function-path``  :mod:`shopsimrl.slime.evaluation`
``eval_rollout``                            ``--eval-function-path``                    :mod:`shopsimrl.slime.evaluation`
==========================================  ==========================================  ====================================

The re-exported names are the implementations' own objects (``is``-identical).  Importing
this module loads none of torch, ray, sglang, slime or transformers.
"""

from __future__ import annotations

from shopsimrl.slime.evaluation import (
    EVAL_FUNCTION_PATH,
    drop_unscored_eval_episodes,
    eval_rollout,
    eval_scored_metrics,
)
from shopsimrl.slime.metrics import enrich_rollout_metrics, record_generated_rollout_groups

__all__ = [
    "EVAL_FUNCTION_PATH",
    "drop_unscored_eval_episodes",
    "enrich_rollout_metrics",
    "eval_rollout",
    "eval_scored_metrics",
    "record_generated_rollout_groups",
]
