"""``shopsimrl compare``: several runs' held-out success against generated episodes (chart and table)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shopsimrl.argtypes import existing_folder, out_file
from shopsimrl.commands.dispatch import handled_by
from shopsimrl.errors import UsageError
from shopsimrl.io import printable

EXIT_OK = 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "compare",
        help="held-out eval success against generated episodes for several runs (chart and table)",
        description="Read each run folder's metrics.jsonl (runs made with --learner grpo --eval-every N) and draw "
        "eval success against the episodes generated so far, one line per run; print the table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("runs", nargs="+", type=existing_folder, metavar="RUN", help="run folders (OUT/NAME)")
    p.add_argument("--chart", type=out_file, default=Path("compare.png"), help="the PNG to write")
    p.add_argument("--x", choices=("episodes", "wall"), default="episodes", dest="axis",
                   help="the chart's x axis: generated episodes, or modelled wall time (runs on --clock modelled)")
    handled_by(p, handle)


def handle(args: argparse.Namespace) -> int:
    # rich and the chart (matplotlib) load only when the command runs: --help stays fast
    from rich.console import Console
    from rich.table import Table

    from shopsimrl.learn.compare import AXES, draw, left_out_notes, read_run, table_rows

    curves = [read_run(run) for run in args.runs]  # a file that is not a run's: BadFileError, a refusal
    empty = [c.name for c in curves if not c.points]
    if empty:
        raise UsageError(f"no evaluation in {', '.join(map(printable, empty))} (run with --learner grpo --eval-every N)")
    unclocked = [c.name for c in curves if any(p.wall_s is None for p in c.points)]
    if args.axis == "wall" and unclocked:
        raise UsageError(f"--x wall: {', '.join(map(printable, unclocked))} ran on the machine's clock (no modelled "
                         f"wall time); run with --clock modelled, or draw --x episodes")
    rows = table_rows(curves)
    table = Table(title="held-out eval (val split): sampled success; episodes = generated episodes")
    for column in rows[0]:
        names = column in ("run", "learner/selection/waves")
        table.add_column(column, justify="left" if names else "right", no_wrap=names)
    for row in rows:
        table.add_row(*(_cell(column, value) for column, value in row.items()))
    console = Console(width=160)
    console.print(table)
    for note in left_out_notes(curves):
        console.print(note, markup=False, highlight=False)
    chart = draw(curves, args.chart, title=f"held-out success against {AXES[args.axis]}", axis=args.axis)
    console.print(f"chart: {printable(chart, limit=1000)}", markup=False, highlight=False)
    return EXIT_OK


def _cell(column: str, value: object) -> str:
    from rich.markup import escape  # loaded by handle() already: rich only when the command runs

    if value is None:
        return "-"
    if isinstance(value, str):  # user data (folder names, run.json labels): no escape sequences, no rich markup
        return escape(printable(value))
    if "success" in column or "greedy" in column or "share" in column or "brier" in column:
        return f"{float(value):.3f}"  # type: ignore[arg-type]
    if "hours" in column:
        return f"{float(value):.2f}"  # type: ignore[arg-type]
    if "episodes" in column:
        return f"{float(value):,.0f}"  # type: ignore[arg-type]
    return str(value)
