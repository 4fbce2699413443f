"""slime integration: the pieces behind the hooks slime loads by dotted path.

The hooks themselves live in :mod:`shopsimrl.slime_runtime` and
:mod:`shopsimrl.slime_metrics` (thin translations of slime's signatures); this
package holds what they share: the one hook-state object slime forces on us
(:mod:`.state`), slime ``Sample`` helpers (:mod:`.samples`), the token-exact
SGLang policy (:mod:`.policy`), and the ``data export`` / ``train`` commands.
Nothing here imports torch, ray, sglang, slime or transformers at import time.
"""
