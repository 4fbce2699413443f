"""slime integration: the hooks slime loads by dotted path, and what they share.

Each hook lives here, a module per idea: the group filter (:mod:`.filter`), the reward
post-process (:mod:`.rewards`), the generate hook (:mod:`.generate`), the rollout step's
metric hooks (:mod:`.metrics`), the eval hooks (:mod:`.evaluation`), the adaptive rollout
function (:mod:`.rollout_fn`) and the prompt-selection data source (:mod:`.data_source`).
slime finds the first five under their stable dotted paths in :mod:`shopsimrl.slime_runtime`
and :mod:`shopsimrl.slime_metrics`, which re-export them (the paths are listed once, in
:mod:`shopsimrl.defaults`).  What the hooks share: the one hook-state object slime forces on us
(:mod:`.state`), slime's abort (:mod:`.abort`), slime ``Sample`` helpers (:mod:`.samples`),
the token-exact SGLang policy (:mod:`.policy`); and the ``data export`` / ``train`` /
``slime check`` commands.  Nothing here imports torch, ray, sglang, slime or transformers at
import time.
"""
