"""The rollout layer: sibling episodes -> groups -> waves -> one kept batch per step.

The async driver (:class:`StepDriver`, :func:`run_rollout`) is the I/O shell around
:class:`shopsimrl.sampling.step.RolloutStep`; groups are triaged before the filter;
each step leaves ``batch.jsonl``, ``events.jsonl``, ``metrics.json``, traces and
triage under ``runs/<name>/step-<k>/``.  Importing this package never imports
the agent's policies (only its episode record, ``shopsimrl.agent.result``), the
environment's server, W&B or any training stack.
"""

from shopsimrl.rollout.completions import CompletionQueue
from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.driver import StepDriver
from shopsimrl.rollout.group import (
    CLASSIFICATIONS,
    EpisodeMeter,
    EpisodeRunner,
    EpisodeSlots,
    EpisodeSpec,
    GroupRun,
    classify,
    never_succeeded,
    run_group,
)
from shopsimrl.rollout.outputs import RunPaths, StepPaths
from shopsimrl.rollout.progress import StepObserver, StepProgress, WaveStats
from shopsimrl.rollout.report import StepReport, step_metrics
from shopsimrl.rollout.run import RolloutConfig, RolloutResult, run_rollout

__all__ = [
    "CLASSIFICATIONS",
    "CompletionQueue",
    "EpisodeMeter",
    "EpisodeRunner",
    "EpisodeSlots",
    "EpisodeSpec",
    "GroupRun",
    "RolloutConfig",
    "RunContext",
    "RunPaths",
    "RolloutResult",
    "StepDriver",
    "StepObserver",
    "StepPaths",
    "StepProgress",
    "StepReport",
    "WaveStats",
    "classify",
    "never_succeeded",
    "run_group",
    "run_rollout",
    "step_metrics",
]
