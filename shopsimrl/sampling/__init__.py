"""The pure decision core of dynamic sampling: no I/O, no asyncio, no clock, no slime.

- verdicts (:func:`group_verdict`): TECHNICAL / ZERO_STD / VARIED for a group of slime-like samples;
- the filter's output and slime's drop rule (:func:`filter_output`, :func:`should_drop`);
- the consecutive-failure stop (:class:`ConsecutiveFailureGuard`, :class:`TooManyTechnicalFailures`);
- the wave loop as a sans-I/O state machine (:class:`WaveController`, its :class:`State` and the table
  :data:`TRANSITIONS` of what each state allows) and its replay (:func:`replay`);
- one rollout step around it, events in and actions out (``shopsimrl.sampling.step.RolloutStep``: the
  controller, the selector of ``source.py``, the wave sizer), which every loop runs;
- the docs/dynamic-sampling.md §7 metrics, GRPO advantages and the optimizer-update split.
"""

from shopsimrl.sampling.advantages import GRPO_EPSILON, grpo_advantages
from shopsimrl.sampling.controller import (
    ALLOWED,
    TRANSITIONS,
    ControllerStateError,
    Decision,
    GroupDecision,
    State,
    WaveController,
)
from shopsimrl.sampling.filter import (
    DROP_REASONS,
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    FilterOutput,
    filter_output,
    should_drop,
)
from shopsimrl.sampling.guard import ConsecutiveFailureGuard, TooManyTechnicalFailures
from shopsimrl.sampling.knobs import KnobError, SamplingKnobs
from shopsimrl.sampling.metrics import (
    GroupOutcome,
    TrajectoryOutcome,
    WasteCounts,
    dynamic_filter_drop_key,
    rollout_step_metrics,
)
from shopsimrl.sampling.replay import ReplayEvent, ReplayResult, SupplyExhausted, replay
from shopsimrl.sampling.updates import split_into_updates
from shopsimrl.sampling.verdict import Verdict, group_verdict, unique_rollout_rewards

__all__ = [
    "ALLOWED",
    "DROP_REASONS",
    "GRPO_EPSILON",
    "REASON_TECHNICAL",
    "REASON_ZERO_STD",
    "TRANSITIONS",
    "ConsecutiveFailureGuard",
    "ControllerStateError",
    "Decision",
    "FilterOutput",
    "GroupDecision",
    "GroupOutcome",
    "KnobError",
    "ReplayEvent",
    "ReplayResult",
    "SamplingKnobs",
    "State",
    "SupplyExhausted",
    "TooManyTechnicalFailures",
    "TrajectoryOutcome",
    "Verdict",
    "WasteCounts",
    "WaveController",
    "dynamic_filter_drop_key",
    "filter_output",
    "grpo_advantages",
    "group_verdict",
    "replay",
    "rollout_step_metrics",
    "should_drop",
    "split_into_updates",
    "unique_rollout_rewards",
]
