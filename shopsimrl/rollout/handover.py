"""What a finished step hands on, once its report is built: figures, the learner, the batch, the metrics.

The order is part of the contract: the selector's and staged siblings' figures join the
metrics first; the learning policy trains on the informative groups; the wave timeline is drawn;
``batch.jsonl`` is written; a learner trained on the batch adds its figures (and writes its files); on the
modelled clock the step's modelled rollout, training and weight-sync seconds join them; only then come the step's last writes, ``state.json``, ``metrics.json``, the ``metrics.jsonl`` line and the
completion marker (a step with a marker is complete: ``journal.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from shopsimrl.rollout.context import RunContext
from shopsimrl.rollout.outputs import StepPaths, batch_records, write_batch, write_step_end
from shopsimrl.rollout.report import StepReport
from shopsimrl.rollout.timeline import write_wave_timeline
from shopsimrl.sampling.selection_metrics import selector_step_metrics
from shopsimrl.sampling.staged import staged_step_metrics


async def hand_over(ctx: RunContext, paths: StepPaths, report: StepReport, *, stage_counts: dict[str, int],
                    decisions: Mapping[int, str]) -> None:
    """``stage_counts``: ``RolloutStep.stage_counts``; ``decisions``: each judged group's decision value."""
    groups, step = report.groups, report.step
    fallback = set(report.fallback)
    informative = [groups[i].task_id for i in report.kept if i not in fallback]
    if not ctx.faithful:
        report.metrics.update(selector_step_metrics(
            ctx.source.pop_stats(), informative=len(informative),
            generated_episodes=sum(len(g.specs) for g in groups.values()),
            coverage=ctx.source.coverage(),
        ))
    report.metrics.update(ctx.source.trained(groups[i].task_id for i in report.kept))  # concentration, every run
    if ctx.staging is not None:
        report.metrics.update(staged_step_metrics(stage_counts))
    if ctx.learner is not None:
        ctx.learner(informative)
    if ctx.timeline:
        write_wave_timeline(paths.root / "wave_timeline.png", report.events, title=f"step {step}: wave timeline")
    rows = batch_records(
        [groups[i] for i in report.kept], decisions, step=step,
        n_samples_per_prompt=ctx.knobs.n_samples_per_prompt, global_batch_size=ctx.knobs.global_batch_size,
    )
    write_batch(paths, rows)
    if ctx.after_batch is not None:
        report.metrics.update(await ctx.after_batch(step, rows))
    if ctx.loop_clock is not None and ctx.time_model is not None:  # the modelled clock: rollout, training, sync
        tokens = sum(m.tokens for i in report.kept for m in groups[i].meters)
        report.metrics.update(ctx.loop_clock.add(report.wall_seconds, ctx.time_model.train_seconds(tokens), tokens))
    write_step_end(ctx.paths, paths, step, report.metrics, state=ctx.run_state(), journal=ctx.journal)
