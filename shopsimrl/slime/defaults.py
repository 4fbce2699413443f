"""The slime integration's own defaults, each defined once (the knobs it shares with other parts come from
their defaults modules: env, agent, sampling).  Imports nothing, so option parsers read it cheaply."""

from __future__ import annotations

#: slime's prompt file: written by ``shopsimrl data export --out``, read by the launcher (``PROMPT_DATA``).
DEFAULT_PROMPT_DATA = "data/shopsim_train.jsonl"
#: Where the generate hook writes traces when the custom config names no ``shopsim_trace_dir``.
DEFAULT_TRACE_DIR = "shopsim_traces"
#: slime's ``--data-source-path`` for prompt selection (``SELECTION=informative``).
DATA_SOURCE_PATH = "shopsimrl.slime.data_source.SelectorDataSource"
#: slime's ``--rollout-function-path`` for adaptive waves (``WAVES=adaptive``).
ROLLOUT_FUNCTION_PATH = "shopsimrl.slime.rollout_fn.generate_rollout"
