"""Every figure in the documentation is the one its results file gives (benchmarks/render_docs.py).

A page marks each figure as a `<!-- render: NAME -->` region; `python -m benchmarks.render_docs` writes it from
benchmarks/results/*.json, and `--check` fails when a page and its results disagree.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from benchmarks import render_docs
from benchmarks.doc_figures import FIGURES, Results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def copy_of_the_pages(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy(page, tmp_path / "docs" / page.name)
    return tmp_path


def test_every_page_agrees_with_the_results() -> None:
    assert render_docs.check(ROOT) == [], "run `python -m benchmarks.render_docs` after a benchmark"


def test_the_check_names_a_figure_edited_by_hand(tmp_path: Path) -> None:
    root = copy_of_the_pages(tmp_path)
    page = root / "docs" / "benchmarks.md"
    text = page.read_text()
    region = next(r for r in render_docs.regions(page, text) if r.name == "core.decisions")
    edited = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), region.text, count=1)
    assert edited != region.text
    page.write_text(text[: region.start] + edited + text[region.end :])

    results = Results(RESULTS)
    assert render_docs.check(root, results) == [f"docs/benchmarks.md:{region.line}: core.decisions differs from "
                                                "benchmarks/results"]
    assert render_docs.main(["--check", "--root", str(root)]) == 1
    assert render_docs.render(root, results) == [f"docs/benchmarks.md:{region.line}: core.decisions"]
    assert page.read_text() == text
    assert render_docs.check(root, results) == []


def test_an_inline_figure_stays_on_its_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("reaches it with <!-- render: selection.adaptive_episodes_to_final -->1.00×<!-- /render --> the "
                    "episodes\n")
    text, stale = render_docs.render_page(page, Results(RESULTS))
    assert [r.name for r in stale] == ["selection.adaptive_episodes_to_final"]
    assert text.count("\n") == 1 and "1.00×" not in text


def test_an_unknown_figure_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- render: no.such.figure -->1<!-- /render -->\n")
    with pytest.raises(KeyError, match="no.such.figure"):
        render_docs.render_page(page, Results(RESULTS))


def test_every_figure_is_shown_on_some_page() -> None:
    used = {r.name for page in render_docs.pages(ROOT) for r in render_docs.regions(page, page.read_text())}
    assert set(FIGURES) - used == set(), "a figure no page shows: remove it or show it"


# Notes that a table is older than the code it describes belong to CHANGELOG.md, with the table gone or re-run.
STALE_NOTES = re.compile(r"predates|measured before 20|when it was called|before the rename|still say `informative`",
                         re.I)


def test_no_page_carries_a_stale_table_note() -> None:
    offenders = [f"{page.relative_to(ROOT)}:{n}: {line.strip()[:80]}" for page in render_docs.pages(ROOT)
                 for n, line in enumerate(page.read_text().splitlines(), 1) if STALE_NOTES.search(line)]
    assert not offenders, "\n".join(offenders)
