"""How kept groups become optimizer updates (docs/dynamic-sampling.md §6): whole groups, ``global_batch_size`` episodes each.

slime sorts the kept groups by index before training; the split cuts that order
into consecutive chunks.  The split never changes which groups were kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from shopsimrl.sampling.knobs import validate_update_knobs

T = TypeVar("T")


def split_into_updates(kept_groups: Sequence[T], n_samples_per_prompt: int, global_batch_size: int) -> list[list[T]]:
    """Cut the kept groups (in training order) into updates of ``global_batch_size // n`` whole groups."""
    validate_update_knobs(len(kept_groups), n_samples_per_prompt, global_batch_size)
    per_update = global_batch_size // n_samples_per_prompt
    return [list(kept_groups[i : i + per_update]) for i in range(0, len(kept_groups), per_update)]
