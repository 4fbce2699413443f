"""What a person watches: a live view per wave while a step runs, a summary table per step at the end.

On a terminal the view is a ``rich`` Live table with progress bars, redrawn from
the event loop (no refresh thread touches the driver's state).  When stdout is
not a terminal (tests, CI, ``| tee``) it degrades to plain log lines: one per
wave submitted, one every few seconds, one per finished step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from shopsimrl.rollout.loops import CLOCK_KEYS, CLOCK_PREFIX
from shopsimrl.rollout.progress import StepProgress, WaveStats
from shopsimrl.rollout.report import StepReport, summary_row
from shopsimrl.sampling import REASON_TECHNICAL, REASON_ZERO_STD

#: live-view columns: (header, what it shows)
WAVE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("wave", "1-based wave number inside the step"),
    ("submitted", "groups submitted in this wave (over_sampling_batch_size)"),
    ("running", "groups with at least one episode holding a slot, not yet finished"),
    ("completed", "groups finished and judged by the filter"),
    ("kept", "groups that entered the batch (accepted + fallback)"),
    ("fallback", "zero-std groups admitted because remaining <= target"),
    ("zero-std drop", "zero-std groups really dropped (remaining -= 1)"),
    ("technical drop", "groups with an unscored sibling: always dropped"),
    ("surplus", "groups finished after the batch was full: never trained"),
    ("aborted", "groups cancelled when the step reached its target"),
    ("progress", "completed / submitted"),
)

#: summary-table columns: (header, key of report.summary_row, format)
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("step", "step", "{}"),
    ("kept", "kept", "{}"),
    ("fallback", "fallback", "{}"),
    ("zero-std drops", "zero_std_drops", "{}"),
    ("technical drops", "technical_drops", "{}"),
    ("surplus", "surplus", "{}"),
    ("aborted", "aborted", "{}"),
    ("waves", "waves", "{}"),
    ("success rate", "success_rate", "{:.3f}"),
    ("reward mean", "reward_mean", "{:.3f}"),
    ("wall s", "wall_seconds", "{:.2f}"),
    ("episodes/s", "episodes_per_second", "{:.1f}"),
)

PLAIN_PROGRESS_EVERY = 5.0  # seconds between plain progress lines
LIVE_REDRAW_EVERY = 0.1


def _wave_row(w: WaveStats) -> list[Any]:
    return [
        str(w.wave), str(w.submitted), str(w.running), str(w.completed), str(w.kept), str(w.fallback),
        str(w.dropped.get(REASON_ZERO_STD, 0)), str(w.dropped.get(REASON_TECHNICAL, 0)), str(w.surplus),
        str(w.aborted), ProgressBar(total=max(w.submitted, 1), completed=w.completed + w.aborted, width=12),
    ]


def render_progress(p: StepProgress) -> Group:
    """The live view of one step: a header with the kept bar, then one row per wave."""
    header = Table.grid(padding=(0, 1))
    header.add_row(Text(f"step {p.step}", style="bold"), ProgressBar(total=p.target, completed=p.kept, width=24),
                   Text(f"kept {p.kept}/{p.target}"))
    header.add_row(Text(""), Text(f"remaining {p.remaining}  episodes running {p.episodes_running}  "
                                  f"{p.elapsed:.1f}s  {p.state}"), Text(""))
    waves = Table(box=None, padding=(0, 1), header_style="bold")
    for title, _ in WAVE_COLUMNS:
        waves.add_column(title, justify="right" if title != "progress" else "left")
    for w in p.waves:
        waves.add_row(*_wave_row(w))
    return Group(header, waves)


def plain_progress_line(p: StepProgress) -> str:
    completed = sum(w.completed for w in p.waves)
    submitted = sum(w.submitted for w in p.waves)
    zero = sum(w.dropped.get(REASON_ZERO_STD, 0) for w in p.waves)
    tech = sum(w.dropped.get(REASON_TECHNICAL, 0) for w in p.waves)
    fallback = sum(w.fallback for w in p.waves)
    surplus = sum(w.surplus for w in p.waves)
    running = sum(w.running for w in p.waves)
    return (f"step {p.step} t={p.elapsed:.1f}s waves={len(p.waves)} submitted={submitted} running={running} "
            f"completed={completed} kept={p.kept}/{p.target} fallback={fallback} dropped_zero_std={zero} "
            f"dropped_technical={tech} surplus={surplus} remaining={p.remaining}")


SUMMARY_MIN_WIDTH = 150  # below this the table is drawn transposed (one column per step)


def _cells(step: StepReport | Mapping[str, Any]) -> list[str]:
    row = step if isinstance(step, Mapping) else summary_row(step)
    return [("-" if row[key] is None else fmt.format(row[key])) for _t, key, fmt in SUMMARY_COLUMNS]


def summary_table(reports: Sequence[StepReport | Mapping[str, Any]], *, width: int = SUMMARY_MIN_WIDTH) -> Table:
    """One row per step (a report, or its :func:`~shopsimrl.rollout.report.summary_row`); on a narrow console,
    one column per step instead."""
    table = Table(title="rollout steps", header_style="bold")
    if width >= SUMMARY_MIN_WIDTH:
        for title, _key, _fmt in SUMMARY_COLUMNS:
            table.add_column(title, justify="right")
        for report in reports:
            table.add_row(*_cells(report))
        return table
    table.add_column("step")
    for report in reports:
        table.add_column(str(report["step"] if isinstance(report, Mapping) else report.step), justify="right")
    columns = [_cells(r) for r in reports]
    for i, (title, _key, _fmt) in enumerate(SUMMARY_COLUMNS[1:], start=1):
        table.add_row(title, *(cells[i] for cells in columns))
    return table


def _clock_line(metrics: Mapping[str, Any]) -> str:
    """The modelled clock's figures of a step (nothing on the machine's clock)."""
    if CLOCK_PREFIX + "step_s" not in metrics:
        return ""
    rollout, train, sync, step, total = (metrics[CLOCK_PREFIX + k] for k in CLOCK_KEYS[:5])
    return (f"; modelled: rollout {rollout:.1f}s, train {train:.1f}s, sync {sync:.1f}s, step {step:.1f}s, "
            f"total {total / 3600:.2f}h")


class RolloutView:
    """A :class:`~shopsimrl.rollout.progress.StepObserver` that draws to ``console``.

    ``live=None`` picks the live view on a terminal and plain lines otherwise.
    Use as a context manager around the run.
    """

    def __init__(self, console: Console | None = None, *, live: bool | None = None) -> None:
        self.console = console or Console()
        self.live_mode = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._last_draw = 0.0
        self._waves_seen = 0
        self._step = 0

    def __enter__(self) -> RolloutView:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop_live()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- StepObserver -----------------------------------------------------------------------------
    def step_started(self, step: int, target: int) -> None:
        self._step = step
        self._waves_seen = 0
        self._last_draw = 0.0
        if self.live_mode:
            self._live = Live(Text(f"step {step}: starting"), console=self.console, auto_refresh=False,
                              transient=False)
            self._live.start()
        else:
            self.console.print(f"step {step}: target {target} kept groups")

    def progressed(self, snapshot: Callable[[], StepProgress]) -> None:
        now = time.monotonic()
        if self.live_mode:
            if now - self._last_draw >= LIVE_REDRAW_EVERY and self._live is not None:
                self._last_draw = now
                self._live.update(render_progress(snapshot()), refresh=True)
            return
        progress = snapshot()
        for w in progress.waves[self._waves_seen:]:
            self.console.print(f"step {progress.step} wave {w.wave}: submitted {w.submitted} groups "
                               f"at t={progress.elapsed:.2f}s (remaining {progress.remaining})")
        self._waves_seen = len(progress.waves)
        if now - self._last_draw >= PLAIN_PROGRESS_EVERY:
            self._last_draw = now
            self.console.print(plain_progress_line(progress))

    def step_finished(self, report: StepReport | None, progress: StepProgress) -> None:
        if self._live is not None:
            self._live.update(render_progress(progress), refresh=True)
            self._stop_live()
        else:
            self.console.print(plain_progress_line(progress))
        if report is None:
            self.console.print(f"step {progress.step}: stopped after {progress.elapsed:.1f}s")
            return
        self.console.print(
            f"step {report.step} done in {report.wall_seconds:.1f}s: kept {len(report.kept)} "
            f"(fallback {len(report.fallback)}), dropped zero-std {len(report.dropped.get(REASON_ZERO_STD, []))} "
            f"technical {len(report.dropped.get(REASON_TECHNICAL, []))}, surplus {len(report.surplus)}, "
            f"aborted {len(report.aborted)}, waves {report.waves}" + _clock_line(report.metrics)
        )

    def summary(self, reports: Sequence[StepReport | Mapping[str, Any]]) -> None:
        if reports:
            self.console.print(summary_table(reports, width=self.console.width))
