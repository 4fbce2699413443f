"""Optional Weights & Biases logging: the same keys as ``metrics.json``, one log call per step.

``wandb`` is imported only when ``--wandb`` is given, so the rollout works (and
imports fast) without it; ``--wandb-mode offline`` logs without a network.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from shopsimrl.errors import Refusal
from shopsimrl.rollout.report import StepReport

WANDB_MODES = ("online", "offline", "disabled")


class WandbUnavailable(Refusal, RuntimeError):
    """``--wandb`` was asked for but the ``wandb`` package is not installed."""


def import_wandb() -> ModuleType:
    try:
        return importlib.import_module("wandb")
    except ImportError as exc:
        raise WandbUnavailable(
            "--wandb needs the wandb package, which is not installed: pip install 'shopsimrl[wandb]' "
            "(or drop --wandb; every metric is also in runs/<name>/metrics.jsonl)"
        ) from exc


class WandbLogger:
    """One W&B run per rollout run; ``log`` sends a step's metrics with ``step=k``."""

    def __init__(
        self,
        *,
        project: str,
        name: str,
        group: str | None = None,
        directory: str | Path | None = None,
        mode: str = "online",
        config: dict[str, Any] | None = None,
    ) -> None:
        if mode not in WANDB_MODES:
            raise ValueError(f"unknown W&B mode {mode!r}; expected one of {', '.join(WANDB_MODES)}")
        wandb = import_wandb()
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project, name=name, group=group, dir=str(directory) if directory else None, mode=mode,
            config=config or {}, reinit="finish_previous",
        )

    def log(self, report: StepReport) -> None:
        self.run.log(dict(report.metrics), step=report.step)

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)
