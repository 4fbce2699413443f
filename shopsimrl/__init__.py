"""ShopSimRL: the dynamic-sampling rollout layer for GRPO on slime.

Importing this package is cheap and never imports torch, ray, sglang, slime or
transformers; the parts that need them import them lazily.
"""

__version__ = "0.1.0"
