"""Stable dotted paths for slime's filter, reward post-process and generate hooks.

slime loads each hook by the dotted path in its argv (``slime.utils.misc.load_function``:
import the module, read the attribute), and scripts and saved launch configurations hold
these paths, the filter's since the seed.  So the paths stay here while the code lives in
:mod:`shopsimrl.slime` (a module per hook): this module only re-exports.

============================================  ========================================  =================================
stable path (this module)                     slime flag                                implementation
============================================  ========================================  =================================
``fully_scored_group_filter``                 ``--dynamic-sampling-filter-path``        :mod:`shopsimrl.slime.filter`
``normalize_grpo_by_prompt_and_rollout``      ``--custom-reward-post-process-path``     :mod:`shopsimrl.slime.rewards`
``generate``                                  ``--custom-generate-function-path``       :mod:`shopsimrl.slime.generate`
============================================  ========================================  =================================

The re-exported names are the implementations' own objects (``is``-identical), so
whatever rebinds one here (a test's wrapper around the filter) changes what slime loads,
and nothing else.  Importing this module loads none of torch, ray, sglang, slime or
transformers.
"""

from __future__ import annotations

from shopsimrl.slime.filter import SlimeFilterOutputUnavailable, fully_scored_group_filter, to_dynamic_filter_output
from shopsimrl.slime.generate import UnsupportedSlimeSetting, check_exact_token_settings, generate
from shopsimrl.slime.rewards import (
    GROUP_NORMALIZED_ESTIMATORS,
    STD_NORMALIZED_ESTIMATORS,
    normalize_grpo_by_prompt_and_rollout,
)

__all__ = [
    "GROUP_NORMALIZED_ESTIMATORS",
    "STD_NORMALIZED_ESTIMATORS",
    "SlimeFilterOutputUnavailable",
    "UnsupportedSlimeSetting",
    "check_exact_token_settings",
    "fully_scored_group_filter",
    "generate",
    "normalize_grpo_by_prompt_and_rollout",
    "to_dynamic_filter_output",
]
