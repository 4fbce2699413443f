"""Placeholder until the env's page state is known (replaced by the real heuristic)."""

from __future__ import annotations

from typing import Any


class HeuristicPolicy:
    name = "heuristic"

    def __init__(self, **options: Any) -> None:
        self.options = options
