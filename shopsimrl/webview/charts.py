"""A run page's charts as data: per chart, one line per (run, series), drawn in the browser by plotly.js.

The series are read from each step's row of ``metrics.jsonl`` (docs/dynamic-sampling.md §7 and the waste
figures); a key a run does not report is left out, never drawn as zero.  Held-out success against generated
episodes is :func:`shopsimrl.learn.compare.read_run`'s, the numbers ``shopsimrl compare`` prints.  Modelled
wall time is whatever the rows hold under a ``modelled`` name: every such key is drawn over steps, and a
key of seconds gives held-out success against cumulative modelled seconds, as episodes do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.io import BadFileError, printable
from shopsimrl.learn.compare import RunCurve, read_run
from shopsimrl.rollout.journal import MARKER
from shopsimrl.webview.folder import Folder
from shopsimrl.webview.runs import metrics_rows

_R = "rollout/shopsim/"
_W = _R + "waste/"
#: (chart id, title, y label, ((series label, key), ...)), over steps
OVER_STEPS: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...] = (
    ("rates", "group and episode rates", "rate", (
        ("success", _R + "success_rate"), ("zero-spread drops", _R + "zero_std_group_drop_rate"),
        ("technical drops", _R + "technical_group_drop_rate"), ("scored", _R + "scored_rate"))),
    ("waves", "waves per step", "waves", (("waves", _R + "step/waves"),)),
    ("groups", "groups per step", "groups", (
        ("kept", _W + "groups_kept"), ("dropped zero-spread", _W + "groups_dropped_zero_std"),
        ("dropped technical", _W + "groups_dropped_technical"), ("fallback", _R + "step/fallback_group_count"),
        ("surplus", _W + "groups_surplus"), ("aborted", _W + "groups_aborted"))),
    ("episodes", "generated and trained episodes per step", "episodes", (
        ("generated", _W + "episodes_submitted"), ("trained", _W + "episodes_kept"))),
    ("concentration", "concentration of training on few prompts", "count / share", (
        ("distinct prompts this epoch", _R + "concentration/distinct_prompts_epoch"),
        ("trainings of the most trained prompt", _R + "concentration/max_trainings_per_prompt"),
        ("top-10 share", _R + "concentration/top10_share"))),
    ("selector", "selection per step", "prompts", (
        ("chosen", _R + "selector/prompts_chosen"), ("skipped", _R + "selector/prompts_skipped"),
        ("explored", _R + "selector/prompts_explored"))),
)
MODELLED = "modelled"


def plot_text(text: object) -> str:
    """User data for a plotly label: plotly reads a few HTML tags and entities in text, so none may pass."""
    return printable(text, limit=80).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _number(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _series(rows: dict[int, dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(step, _number(row, key)) for step, row in rows.items()]
    kept = [(s, v) for s, v in points if v is not None]
    return [s for s, _ in kept], [v for _, v in kept]


def charts(folder: Folder, names: Sequence[str]) -> dict[str, Any]:
    """Every chart for the runs ``names`` (one line per run and series) and the errors of runs left out."""
    found: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    several = len(names) > 1
    for name in names:
        try:
            run = folder.run(name)
            rows, notes = metrics_rows(folder, run)
        except BadFileError as exc:
            errors.append(f"{printable(name, limit=60)}: {exc}")
            continue
        errors.extend(f"{printable(name, limit=60)}: {note}" for note in notes)
        for chart, title, ylabel, series in OVER_STEPS:
            for label, key in series:
                xs, ys = _series(rows, key)
                if xs:
                    _chart(found, chart, title, "step", ylabel)["traces"].append(
                        {"name": plot_text(f"{name}: {label}" if several else label), "x": xs, "y": ys})
        modelled = sorted({k for row in rows.values() for k in row if MODELLED in k and _number(row, k) is not None})
        for key in modelled:
            xs, ys = _series(rows, key)
            _chart(found, "modelled", "modelled figures per step", "modelled", step_axis=True)["traces"].append(
                {"name": plot_text(f"{name}: {key}" if several else key), "x": xs, "y": ys})
        _held_out(folder, found, errors, run, name, rows, [k for k in modelled if "second" in k])
    return {"charts": list(found.values()), "errors": errors}  # set as text by the page


def _chart(found: dict[str, dict[str, Any]], chart: str, title: str, xlabel: str, ylabel: str = "",
           *, step_axis: bool = False) -> dict[str, Any]:
    if chart not in found:
        found[chart] = {"id": chart, "title": title, "xlabel": "step" if step_axis else xlabel,
                        "ylabel": ylabel, "traces": []}
    return found[chart]


def _held_out(folder: Folder, found: dict[str, dict[str, Any]], errors: list[str], run: Path, name: str,
              rows: dict[int, dict[str, Any]], seconds_keys: list[str]) -> None:
    """Held-out success (sampled, greedy dashed) against generated episodes and, where the run reports them,
    against cumulative modelled seconds (the first ``modelled`` key of seconds, summed over steps)."""
    if not any(_number(row, "eval/shopsim/trained_steps") is not None for row in rows.values()):
        return
    try:
        _no_links(run, list(rows))  # compare's reader follows links: the viewer never does
        marked = sum(folder.exists(run / f"step-{k}" / MARKER) for k in rows)  # a marker lands after its row
        curve = folder.cached(f"curve/{marked}", run / "metrics.jsonl", lambda: read_run(run))
    except BadFileError as exc:
        errors.append(f"{printable(name, limit=60)}: held-out chart left out: {exc}")
        return
    label = plot_text(name)
    chart = _chart(found, "held-out", "held-out success against generated episodes", "generated episodes",
                   "held-out success (val)")
    _curve_traces(chart, curve, label, lambda p: p.generated)
    if seconds_keys:
        key = seconds_keys[0]
        cumulative = [0.0]
        for step in range(1, max(rows) + 1):
            cumulative.append(cumulative[-1] + (_number(rows.get(step, {}), key) or 0.0))
        timed = _chart(found, "held-out-time", f"held-out success against modelled time ({plot_text(key)}, summed)",
                       "modelled seconds", "held-out success (val)")
        _curve_traces(timed, curve, label, lambda p: cumulative[min(p.trained_steps, len(cumulative) - 1)])


def _no_links(run: Path, steps: list[int]) -> None:
    for path in (run / "run.json", run / "metrics.jsonl", *(run / f"step-{k}" for k in steps),
                 *(run / f"step-{k}" / MARKER for k in steps)):
        if path.is_symlink():
            raise BadFileError(f"{printable(path.relative_to(run))} is a symbolic link: never followed")


def _curve_traces(chart: dict[str, Any], curve: RunCurve, label: str, x: Any) -> None:
    sampled = [p for p in curve.points if p.success is not None]
    greedy = [p for p in curve.points if p.greedy is not None]
    chart["traces"].append({"name": f"{label} sampled", "x": [x(p) for p in sampled], "y": [p.success for p in sampled]})
    if greedy:
        chart["traces"].append({"name": f"{label} greedy", "x": [x(p) for p in greedy], "y": [p.greedy for p in greedy],
                                "dash": "dash"})

