"""Run every ``benchmarks/bench_*.py`` module's ``main(quick=...)`` and summarize them.

``python -m benchmarks.run_all [--quick]``: each benchmark writes its own
``benchmarks/results/<name>.json``; this writes ``benchmarks/results/summary.json``
(every result, with how long each benchmark took and whether it failed) and prints
a table of their numeric results.  A failing benchmark is recorded and the others
still run; the exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from shopsimrl.io import atomic_write_json

BENCH_DIR = Path(__file__).resolve().parent
SUMMARY = BENCH_DIR / "results" / "summary.json"


def discover() -> list[str]:
    """Module names of ``benchmarks/bench_*.py``, sorted."""
    return sorted(f"benchmarks.{m.name}" for m in pkgutil.iter_modules([str(BENCH_DIR)]) if m.name.startswith("bench_"))


def numeric_leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(dotted key, number) for every number in a nested result (booleans included as 0/1)."""
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from numeric_leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, (int, float)):
        yield prefix, float(obj)


def run_one(module_name: str, quick: bool) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = importlib.import_module(module_name).main(quick=quick)
        return {"ok": True, "seconds": time.perf_counter() - started, "result": result}
    except Exception as exc:  # one broken benchmark must not hide the others
        return {"ok": False, "seconds": time.perf_counter() - started,
                "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}


def summary_table(summary: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title="benchmarks", header_style="bold")
    for column in ("benchmark", "status", "seconds", "metric", "value"):
        table.add_column(column, justify="right" if column in ("seconds", "value") else "left")
    for name, entry in summary.items():
        status = "ok" if entry["ok"] else "FAILED"
        leaves = list(numeric_leaves(entry.get("result") or {})) if entry["ok"] else [("error", entry["error"])]
        for i, (key, value) in enumerate(leaves or [("-", "-")]):
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            table.add_row(name if i == 0 else "", status if i == 0 else "",
                          f"{entry['seconds']:.1f}" if i == 0 else "", key, shown)
    return table


def main(quick: bool = False) -> dict[str, Any]:
    benches: dict[str, Any] = {}
    for module_name in discover():
        print(f"== {module_name}", flush=True)
        benches[module_name.removeprefix("benchmarks.")] = run_one(module_name, quick)
    summary = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "benchmarks": benches,
    }
    atomic_write_json(SUMMARY, summary)
    console = Console()
    if not console.is_terminal:  # captured: wide enough for dotted metric names
        console = Console(width=max(console.width, 140))
    console.print(summary_table(benches))
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for CI")
    summary = main(quick=parser.parse_args().quick)
    sys.exit(0 if all(b["ok"] for b in summary["benchmarks"].values()) else 1)
