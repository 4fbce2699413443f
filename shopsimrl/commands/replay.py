"""``shopsimrl replay``: run the wave state machine on a supply of groups and show every decision.

The supply file is read here (the pure ``sampling`` core does no I/O); a file that is not a supply
is a :class:`SupplyFileError`, one line naming the file.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from shopsimrl.argtypes import in_file, int_range
from shopsimrl.commands.dispatch import handled_by
from shopsimrl.defaults import (
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_OVER_SAMPLING_BATCH_SIZE,
    DEFAULT_ROLLOUT_BATCH_SIZE,
)
from shopsimrl.errors import Refusal
from shopsimrl.sampling.guard import TooManyTechnicalFailures
from shopsimrl.sampling.replay import SupplyExhausted, replay
from shopsimrl.sampling.supply import parse_supply
from shopsimrl.sampling.verdict import Verdict

EXIT_STOPPED = 3  # the supply ran out, or the consecutive-failure guard stopped the replay


class SupplyFileError(Refusal, ValueError):
    """A supply file that is not a JSON list of pairs or a verdict,duration CSV; the message names the file."""


#: Built-in supplies: (verdict, duration) lists that illustrate sections of docs/dynamic-sampling.md.
EXAMPLES: dict[str, tuple[str, list[tuple[str, float]]]] = {
    "spec4": (
        "docs/dynamic-sampling.md §4: 16 zero-std finish first, then 2 more zero-std, then 14 with spread",
        [("zero_std", 1.0)] * 16 + [("zero_std", 2.0)] * 2 + [("varied", 3.0)] * 14,
    ),
    "technical-waves": (
        "docs/dynamic-sampling.md §5: 7 technical for every varied group: technical drops force a second, third and fourth wave",
        ([("technical", 1.0)] * 7 + [("varied", 1.0)]) * 16,
    ),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay the wave state machine on a supply of groups",
        description="Replay slime's dynamic-sampling loop (with the ShopSim filter) on a supply of groups, "
        "deterministically, and print every decision.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("supply", nargs="?", type=in_file, help="JSON list of [verdict, duration] or CSV with columns verdict,duration")
    source.add_argument("--example", choices=sorted(EXAMPLES), help="a built-in supply")
    p.add_argument("--rollout-batch-size", type=int_range(1), default=DEFAULT_ROLLOUT_BATCH_SIZE)
    p.add_argument("--over-sampling-batch-size", type=int_range(1), default=DEFAULT_OVER_SAMPLING_BATCH_SIZE)
    p.add_argument("--max-consecutive-failed-groups", type=int_range(1), default=DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS)
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    handled_by(p, run)


def load_supply(path: Path) -> list[tuple[Verdict, float]]:
    """Read a supply file: JSON ``[[verdict, duration], ...]`` or CSV with ``verdict`` and ``duration`` columns.

    Anything else raises :class:`SupplyFileError` naming the file, the item and what is expected.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SupplyFileError(f"{path}: not UTF-8 text; expected JSON or CSV") from None
    except OSError as exc:
        raise SupplyFileError(f"cannot read {path} ({exc.strerror or exc})") from None
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if rows and not {"verdict", "duration"} <= rows[0].keys():
            raise SupplyFileError(f"{path}: CSV needs the columns verdict,duration; found {sorted(k for k in rows[0] if k)}")
        items: list[Any] = []
        for line, row in enumerate(rows, start=2):
            if row.get("verdict") in (None, "") or row.get("duration") in (None, ""):
                raise SupplyFileError(f"{path}: line {line} needs both a verdict and a duration, got {row}")
            items.append([row["verdict"], row["duration"]])
        return _checked(path, _pairs(path, items, "line", start=2))
    try:
        data: Any = json.loads(text)
    except RecursionError:
        raise SupplyFileError(f"{path}: JSON nested too deeply; expected a flat list of [verdict, duration] pairs") from None
    except json.JSONDecodeError as exc:
        raise SupplyFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise SupplyFileError(f"{path}: expected a JSON list of [verdict, duration] pairs")
    return _checked(path, _pairs(path, data, "item", start=0))


def _checked(path: Path, pairs: list[tuple[str, float]]) -> list[tuple[Verdict, float]]:
    """Known verdicts and finite durations >= 0 (the core's own check), refused naming the file."""
    if not pairs:
        raise SupplyFileError(f"{path}: no groups; expected [verdict, duration] pairs")
    try:
        return parse_supply(pairs)
    except ValueError as exc:
        raise SupplyFileError(f"{path}: {exc}") from None


def _pairs(path: Path, items: list[Any], unit: str, *, start: int) -> list[tuple[str, float]]:
    pairs = []
    for i, item in enumerate(items, start=start):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise SupplyFileError(f"{path}: {unit} {i} must be a [verdict, duration] pair, got {item!r:.80}")
        verdict, duration = item
        if not isinstance(verdict, str):
            raise SupplyFileError(f"{path}: {unit} {i}: the verdict must be a string, got {verdict!r:.80}")
        try:
            if isinstance(duration, bool):  # JSON true is not one second
                raise TypeError(duration)
            seconds = float(duration)
        except (TypeError, ValueError):
            raise SupplyFileError(f"{path}: {unit} {i}: the duration must be a number of seconds, "
                                  f"got {duration!r:.80}") from None
        pairs.append((verdict, seconds))
    return pairs


def run(args: argparse.Namespace) -> int:
    # rich loads only when a command prints with it: --help stays fast
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    try:
        if args.example:
            title, supply = EXAMPLES[args.example]
        else:
            title, supply = str(args.supply), load_supply(args.supply)
        result = replay(
            supply,
            rollout_batch_size=args.rollout_batch_size,
            over_sampling_batch_size=args.over_sampling_batch_size,
            max_consecutive_failed_groups=args.max_consecutive_failed_groups,
        )
    except Refusal as exc:  # knobs or the supply file: one line on stderr, as every command refuses
        Console(stderr=True, soft_wrap=True).print(f"shopsimrl replay: [red]error:[/] {escape(str(exc))}")
        return 2
    except (SupplyExhausted, TooManyTechnicalFailures) as exc:
        Console(stderr=True, soft_wrap=True).print(f"shopsimrl replay: [red]{type(exc).__name__}:[/] {escape(str(exc))}")
        return EXIT_STOPPED
    if args.json:
        print(json.dumps({"summary": result.summary(), "kept": result.kept, "fallback": result.fallback,
                          "dropped": result.dropped, "surplus": result.surplus, "aborted": result.aborted,
                          "wave_times": result.wave_times, "events": [e.as_dict() for e in result.events]}, indent=2))
        return 0
    console.print(f"[bold]{title}[/]  (target {args.rollout_batch_size}, wave {args.over_sampling_batch_size})")
    events = Table("t", "group", "wave", "verdict", "decision", "remaining", "kept", title="decisions")
    for e in result.events:
        d = e.group
        style = {"dropped": "red", "fallback": "yellow", "surplus": "magenta"}.get(d.decision.value, "green")
        events.add_row(f"{e.time:g}", str(d.index), str(d.wave), d.verdict.value, f"[{style}]{d.decision.value}[/]",
                       str(d.remaining), str(d.kept))
    console.print(events)
    summary = Table("kept", "fallback", "zero-std drops", "technical drops", "surplus", "aborted", "waves", "submitted",
                    title="step")
    s = result.summary()
    summary.add_row(*(str(s[k]) for k in ("kept", "fallback", "zero_std_group_drop_count", "technical_group_drop_count",
                                          "surplus", "aborted", "waves", "submitted")))
    console.print(summary)
    return 0
