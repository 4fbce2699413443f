"""Every figure in the documentation, rendered from ``benchmarks/results/*.json``.

A page marks a figure as a region::

    <!-- render: selection.products_2000 -->
    ...the table, written by this script...
    <!-- /render -->

or inline, on one line: ``... with <!-- render: selection.adaptive_episodes_to_final -->0.72×<!-- /render --> the episodes``.
The name picks a function of ``FIGURES`` (``benchmarks/doc_figures.py``), which reads the results and returns the
region's text.

    python -m benchmarks.render_docs           # rewrite the regions of README.md and docs/*.md (atomically)
    python -m benchmarks.render_docs --check   # exit 1, naming every region that disagrees with the results

A new figure is one function in ``benchmarks/doc_figures.py``, registered with ``@figure("name")``, and one region in
a page.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.doc_figures import FIGURES, RESULTS, Results
from shopsimrl.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
# A marker quoted in backticks (a page explaining the markers) is not a region.
REGION = re.compile(r"(?<!`)<!-- render: ([\w.\-/]+) -->(.*?)<!-- /render -->", re.S)


# ---- the pages -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Region:
    page: Path
    name: str
    line: int
    start: int
    end: int
    text: str


def pages(root: Path) -> list[Path]:
    return sorted([root / "README.md", *(root / "docs").glob("*.md")])


def regions(page: Path, text: str) -> Iterator[Region]:
    for m in REGION.finditer(text):
        yield Region(page, m.group(1), text.count("\n", 0, m.start()) + 1, m.start(2), m.end(2), m.group(2))


def rendered(region: Region, results: Results) -> str:
    """The region's text as the results give it: a block keeps its lines, an inline value its line."""
    if region.name not in FIGURES:
        raise KeyError(f"{region.page.name}:{region.line}: no figure named {region.name!r} in benchmarks/doc_figures.py")
    text = FIGURES[region.name](results).strip("\n")
    return f"\n{text}\n" if region.text.startswith("\n") else text


def render_page(page: Path, results: Results) -> tuple[str, list[Region]]:
    """The page with every region rendered, and the regions that disagreed."""
    text = page.read_text()
    out, last, stale = [], 0, []
    for region in regions(page, text):
        new = rendered(region, results)
        if new != region.text:
            stale.append(region)
        out += [text[last:region.start], new]
        last = region.end
    return "".join([*out, text[last:]]), stale


def check(root: Path = ROOT, results: Results | None = None) -> list[str]:
    """One line per region that disagrees with the results (empty: every page agrees)."""
    results = results or Results(RESULTS)
    return [f"{r.page.relative_to(root)}:{r.line}: {r.name} differs from benchmarks/results"
            for page in pages(root) for r in render_page(page, results)[1]]


def render(root: Path = ROOT, results: Results | None = None) -> list[str]:
    """Rewrite every page whose regions disagree; return what changed."""
    results = results or Results(RESULTS)
    changed = []
    for page in pages(root):
        text, stale = render_page(page, results)
        if stale:
            atomic_write_text(page, text)
            changed += [f"{r.page.relative_to(root)}:{r.line}: {r.name}" for r in stale]
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.render_docs", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a region disagrees")
    parser.add_argument("--root", type=Path, default=ROOT, help="the pages' repository (default: this one)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder (default: this one's)")
    args = parser.parse_args(argv)
    results = Results(args.results)
    if args.check:
        stale = check(args.root, results)
        print("\n".join(stale) if stale else "every figure agrees with benchmarks/results")
        return 1 if stale else 0
    changed = render(args.root, results)
    print("\n".join(f"rendered {c}" for c in changed) if changed else "nothing to render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
