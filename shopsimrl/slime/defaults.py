"""The slime integration's own defaults, each defined once (the knobs it shares with other parts come from
their defaults modules: env, agent, sampling).  Imports nothing, so option parsers read it cheaply."""

from __future__ import annotations

#: slime's prompt file: written by ``shopsimrl data export --out``, read by the launcher (``PROMPT_DATA``).
DEFAULT_PROMPT_DATA = "data/shopsim_train.jsonl"
#: Where the generate hook writes traces when the custom config names no ``shopsim_trace_dir``.
DEFAULT_TRACE_DIR = "shopsim_traces"
#: slime's ``--data-source-path`` for prompt selection (``SELECTION=informative``).
DATA_SOURCE_PATH = "shopsimrl.slime.data_source.SelectorDataSource"
#: slime's ``--data-source-path`` under ``ASYNC=1`` where ``train.py`` runs slime's own (``SELECTION=seed WAVES=fixed``):
#: slime's own data source, saving its state as of the end of each rollout (``train_async.py`` saves after the next drew).
SLIME_ORDER_DATA_SOURCE_PATH = "shopsimrl.slime.data_source.slime_order_data_source"
#: slime's ``--rollout-function-path`` for adaptive waves (``WAVES=adaptive``).
ROLLOUT_FUNCTION_PATH = "shopsimrl.slime.rollout_fn.generate_rollout"
#: The hooks slime loads by dotted path on every run, by slime flag: the one place their paths are written.
#: These are the public, stable paths, not where the code lives (that is ``shopsimrl.slime.filter``, ``.rewards``,
#: ``.generate``, ``.metrics``, ``.evaluation``): slime users' scripts and saved launch configs already hold them
#: (the filter's is the seed's), so ``shopsimrl.slime_runtime`` and ``shopsimrl.slime_metrics`` re-export each hook
#: under its old name and the launcher keeps writing these.  tests/slime_hooks/test_hook_paths.py checks that each
#: resolves to its implementation.
HOOKS: dict[str, str] = {  # a constant (read, never written)
    "--dynamic-sampling-filter-path": "shopsimrl.slime_runtime.fully_scored_group_filter",
    "--custom-reward-post-process-path": "shopsimrl.slime_runtime.normalize_grpo_by_prompt_and_rollout",
    "--custom-generate-function-path": "shopsimrl.slime_runtime.generate",
    "--rollout-all-samples-process-path": "shopsimrl.slime_metrics.record_generated_rollout_groups",
    "--custom-rollout-log-function-path": "shopsimrl.slime_metrics.enrich_rollout_metrics",
    "--custom-eval-rollout-log-function-path": "shopsimrl.slime_metrics.drop_unscored_eval_episodes",
    "--eval-function-path": "shopsimrl.slime_metrics.eval_rollout",
}
