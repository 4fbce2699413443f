"""Every dotted path slime is given resolves to the hook's one implementation under ``shopsimrl/slime/``.

The paths in ``HOOKS`` are the ones slime users hold (the filter's is the seed's); the code lives
in a module per hook.  slime's own loader on these paths: tests/slime_harness/test_hook_paths.py.
"""

from __future__ import annotations

import importlib

import pytest

from shopsimrl.defaults import DATA_SOURCE_PATH, HOOKS, ROLLOUT_FUNCTION_PATH, SLIME_ORDER_DATA_SOURCE_PATH
from shopsimrl.slime import data_source, evaluation, generate, metrics, rewards, rollout_fn
from shopsimrl.slime import filter as group_filter

#: slime flag -> (the stable path users hold, the implementation it must be)
HOMES = {
    "--dynamic-sampling-filter-path": (
        "shopsimrl.slime_runtime.fully_scored_group_filter", group_filter.fully_scored_group_filter),
    "--custom-reward-post-process-path": (
        "shopsimrl.slime_runtime.normalize_grpo_by_prompt_and_rollout", rewards.normalize_grpo_by_prompt_and_rollout),
    "--custom-generate-function-path": ("shopsimrl.slime_runtime.generate", generate.generate),
    "--rollout-all-samples-process-path": (
        "shopsimrl.slime_metrics.record_generated_rollout_groups", metrics.record_generated_rollout_groups),
    "--custom-rollout-log-function-path": (
        "shopsimrl.slime_metrics.enrich_rollout_metrics", metrics.enrich_rollout_metrics),
    "--custom-eval-rollout-log-function-path": (
        "shopsimrl.slime_metrics.drop_unscored_eval_episodes", evaluation.drop_unscored_eval_episodes),
    "--eval-function-path": ("shopsimrl.slime_metrics.eval_rollout", evaluation.eval_rollout),
}


def resolve(path: str) -> object:
    """What slime's ``load_function`` does with a path: import the module, read the attribute."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_seed_filter_path_is_the_one_slime_is_given():
    assert HOOKS["--dynamic-sampling-filter-path"] == "shopsimrl.slime_runtime.fully_scored_group_filter"


def test_the_hooks_slime_is_given_are_exactly_the_stable_paths():
    assert HOOKS == {flag: path for flag, (path, _) in HOMES.items()}


@pytest.mark.parametrize("flag", sorted(HOMES))
def test_each_stable_path_resolves_to_the_implementation(flag):
    path, implementation = HOMES[flag]
    assert resolve(HOOKS[flag]) is implementation
    assert implementation.__module__.startswith("shopsimrl.slime."), implementation.__module__


def test_the_data_source_and_rollout_function_paths_resolve_to_their_homes():
    assert resolve(DATA_SOURCE_PATH) is data_source.SelectorDataSource
    assert resolve(ROLLOUT_FUNCTION_PATH) is rollout_fn.generate_rollout
    assert resolve(SLIME_ORDER_DATA_SOURCE_PATH) is data_source.slime_order_data_source  # ASYNC=1, seed, fixed


@pytest.mark.parametrize(("stable", "homes"), [
    ("shopsimrl.slime_runtime", (group_filter, rewards, generate)),
    ("shopsimrl.slime_metrics", (metrics, evaluation)),
])
def test_the_stable_modules_only_re_export_names_of_the_homes(stable, homes):
    module = importlib.import_module(stable)
    assert module.__all__
    for name in module.__all__:
        owners = [home for home in homes if getattr(home, name, None) is getattr(module, name)]
        assert owners, f"{stable}.{name} is not the object of any of its homes"
