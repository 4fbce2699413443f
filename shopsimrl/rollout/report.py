"""A finished step as data: who went where, what it cost, and the metrics logged for it.

The docs/dynamic-sampling.md §7 keys come from :func:`shopsimrl.sampling.rollout_step_metrics`; this
module only adds what the driver alone knows: env steps and episode-seconds per
fate (kept / dropped / surplus / aborted), wave count and throughput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.rollout.group import GroupRun
from shopsimrl.sampling import (
    REASON_TECHNICAL,
    REASON_ZERO_STD,
    GroupOutcome,
    SamplingKnobs,
    TrajectoryOutcome,
    WasteCounts,
    rollout_step_metrics,
)
from shopsimrl.sampling.concentration import (
    CONCENTRATION_PREFIX,
    DISTINCT_PROMPTS_EPOCH,
    MAX_TRAININGS_PER_PROMPT,
    SEED_ORDER_BOUND,
    TOP10_SHARE,
    concentration_line,
)
from shopsimrl.sampling.metrics import PREFIX, WASTE_PREFIX
from shopsimrl.sampling.step import StepDone

STEP_PREFIX = PREFIX + "step/"


@dataclass
class StepReport:
    """Everything one step decided and spent; ``metrics`` is what metrics.json holds."""

    step: int
    knobs: SamplingKnobs
    groups: dict[int, GroupRun]  # every submitted group, by submission index
    kept: list[int]  # in the order they were kept (fallbacks included)
    fallback: list[int]
    dropped: dict[str, list[int]]
    surplus: list[int]
    aborted: list[int]
    waves: int
    wall_seconds: float
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def completed(self) -> list[int]:
        """Groups the controller judged (kept, dropped, surplus): aborted work excluded."""
        done = [*self.kept, *self.surplus, *(i for ids in self.dropped.values() for i in ids)]
        return sorted(done)

    def fate_indices(self) -> dict[str, list[int]]:
        return {
            "kept": self.kept,
            "dropped": [i for ids in self.dropped.values() for i in ids],
            "surplus": self.surplus,
            "aborted": self.aborted,
        }


def _outcome(group: GroupRun) -> GroupOutcome:
    return GroupOutcome(
        group.index,
        [
            TrajectoryOutcome(ep.rollout_id, bool(ep.scored), ep.reward, ep.strict_reward, ep.success)
            for ep in group.episodes
        ],
    )


def step_metrics(report: StepReport) -> dict[str, float]:
    """docs/dynamic-sampling.md §7 keys + waste (groups, episodes, env steps, episode-seconds per fate) + step figures."""
    knobs = report.knobs
    n = knobs.n_samples_per_prompt
    fates = report.fate_indices()
    completed = report.completed
    waste = WasteCounts(
        submitted=len(report.groups),
        completed=len(completed),
        kept=len(report.kept),
        dropped=len(fates["dropped"]),
        surplus=len(report.surplus),
        aborted=len(report.aborted),
    )
    metrics = rollout_step_metrics(
        [_outcome(report.groups[i]) for i in completed],
        report.kept,
        {reason: len(ids) for reason, ids in report.dropped.items()},
        waste=waste,
        n_samples_per_prompt=n,
    )
    spent = dict(fates, completed=completed, submitted=sorted(report.groups))
    for name, indices in spent.items():
        # the episodes each group was given (n, or the K of a staged group decided after its first stage), in place
        # of n per group
        metrics[f"{WASTE_PREFIX}episodes_{name}"] = float(sum(len(report.groups[i].specs) for i in indices))
        metrics[f"{WASTE_PREFIX}env_steps_{name}"] = float(sum(report.groups[i].env_steps for i in indices))
        metrics[f"{WASTE_PREFIX}episode_seconds_{name}"] = float(sum(report.groups[i].episode_seconds() for i in indices))
    for reason, key in ((REASON_TECHNICAL, "technical"), (REASON_ZERO_STD, "zero_std")):
        ids = report.dropped.get(reason, [])
        metrics[f"{WASTE_PREFIX}groups_dropped_{key}"] = float(len(ids))
        metrics[f"{WASTE_PREFIX}episode_seconds_dropped_{key}"] = float(sum(report.groups[i].episode_seconds() for i in ids))
    wall = report.wall_seconds
    metrics[STEP_PREFIX + "waves"] = float(report.waves)
    metrics[STEP_PREFIX + "fallback_group_count"] = float(len(report.fallback))
    metrics[STEP_PREFIX + "wall_seconds"] = wall
    if wall > 0:
        metrics[STEP_PREFIX + "episodes_per_second"] = metrics[f"{WASTE_PREFIX}episodes_completed"] / wall
        metrics[STEP_PREFIX + "groups_per_second"] = len(completed) / wall
    return metrics


def build_step_report(step: int, knobs: SamplingKnobs, groups: dict[int, GroupRun], done: StepDone, *,
                      wall_seconds: float, events: list[dict[str, Any]]) -> StepReport:
    """A closed step (``RolloutStep.close()``) and the groups it ran, as a report with its metrics."""
    report = StepReport(
        step=step,
        knobs=knobs,
        groups=groups,
        kept=done.kept,
        fallback=done.fallback,
        dropped=done.dropped,
        surplus=done.surplus,
        aborted=done.aborted,
        waves=done.waves,
        wall_seconds=wall_seconds,
        events=events,
    )
    report.metrics = step_metrics(report)
    return report


def summary_row(report: StepReport) -> Mapping[str, Any]:
    """The per-step line of the end-of-run table."""
    m = report.metrics
    return {
        "step": report.step,
        "kept": len(report.kept),
        "fallback": len(report.fallback),
        "zero_std_drops": len(report.dropped.get(REASON_ZERO_STD, [])),
        "technical_drops": len(report.dropped.get(REASON_TECHNICAL, [])),
        "surplus": len(report.surplus),
        "aborted": len(report.aborted),
        "waves": report.waves,
        "success_rate": m.get(PREFIX + "success_rate"),
        "reward_mean": m.get(PREFIX + "reward_mean"),
        "wall_seconds": report.wall_seconds,
        "episodes_per_second": m.get(STEP_PREFIX + "episodes_per_second"),
        # how unevenly the run trains its prompts so far (sampling/concentration.py): the run's summary line
        **{key.removeprefix(CONCENTRATION_PREFIX): m.get(key)
           for key in (MAX_TRAININGS_PER_PROMPT, SEED_ORDER_BOUND, TOP10_SHARE, DISTINCT_PROMPTS_EPOCH)},
    }


def concentration_summary(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The end-of-run line of a run that concentrates (``concentration_line`` of its last step), or ``None``."""
    if not rows:
        return None
    last = rows[-1]
    return concentration_line({CONCENTRATION_PREFIX + k: last.get(k) for k in
                               ("max_trainings_per_prompt", "seed_order_bound", "top10_share")}, int(last["step"]))

