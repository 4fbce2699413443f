"""What a leg recorded (``leg.json``, written by :mod:`.leg`), read the same way by every check."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from shopsimrl.slime.harness.outcome import Outcome


def finished(leg: dict[str, Any] | None) -> bool:
    return bool(leg) and leg.get("status") == 0 and isinstance(leg.get("trained"), dict)  # type: ignore[union-attr]


def nothing_to_compare(leg: dict[str, Any] | None, what: str = "the uninterrupted run") -> Outcome | None:
    """NOT RUN when the leg did not finish or trained nothing: there is nothing to compare."""
    if not leg:
        return Outcome.not_run(f"{what} was not run")
    if not finished(leg):
        return Outcome.not_run(f"{what} did not finish (see loop)")
    if not leg["trained"]:
        return Outcome.not_run(f"{what} trained no step (see loop)")
    return None


def group_size(leg: dict[str, Any]) -> int:
    return int(leg["args"]["n_samples_per_prompt"])


def trained_groups(leg: dict[str, Any], step: str) -> dict[int, list[int]]:
    n = group_size(leg)
    groups: dict[int, list[int]] = defaultdict(list)
    for index in leg["trained"][step]["sample_indices"]:
        groups[index // n].append(index)
    return groups
