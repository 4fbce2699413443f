"""GRPO advantages by prompt and rollout, without torch.

Per group, over the rewards taken once per unique rollout:
``(r - mean) / (std + 1e-6)`` with the unbiased std (torch's default), the std
division optional; each fan-out segment receives its rollout's advantage.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

GRPO_EPSILON = 1e-6


def grpo_advantages(
    rollout_ids: Sequence[Hashable],
    rewards: Sequence[float],
    *,
    std_normalization: bool = True,
    eps: float = GRPO_EPSILON,
    label: object = None,
) -> list[float]:
    """Advantages for one group's samples (segments included), aligned with the inputs.

    With a single unique rollout the std is taken as 0 (torch would give NaN);
    the advantage is then 0.  Segments of one rollout must share their reward.
    """
    if len(rollout_ids) != len(rewards):
        raise ValueError(f"{len(rollout_ids)} rollout ids but {len(rewards)} rewards")
    unique: dict[Hashable, float] = {}
    for rid, reward in zip(rollout_ids, rewards):
        r = float(reward)
        if not math.isfinite(r):
            raise ValueError(f"{label or 'group'}: rollout {rid!r} has a non-finite reward {reward!r}")
        seen = unique.setdefault(rid, r)
        if seen != r:
            raise ValueError(
                f"{label or 'group'}: segments of rollout_id={rid!r} carry different rewards ({seen!r} and {r!r})"
            )
    values = list(unique.values())
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    centered = {rid: r - mean for rid, r in unique.items()}
    if std_normalization:
        std = math.sqrt(sum(c * c for c in centered.values()) / (n - 1)) if n > 1 else 0.0
        scale = 1.0 / (std + eps)
        centered = {rid: c * scale for rid, c in centered.items()}
    return [centered[rid] for rid in rollout_ids]
