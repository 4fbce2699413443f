"""The state diagram in docs/sampling.md is the one scripts/state_diagram.py draws from the controller's table.

Outside tests/sampling on purpose: ``make mutate`` copies only the package and the tests, not docs/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shopsimrl.sampling import TRANSITIONS, State
from shopsimrl.sampling.controller import OPERATIONS
from shopsimrl.sampling.diagram import markdown, mermaid

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "state_diagram.py"
PAGE = ROOT / "docs" / "sampling.md"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_committed_diagram_is_the_one_generated_from_the_table():
    done = run("--check")
    assert done.returncode == 0, done.stderr
    assert markdown() in PAGE.read_text()


def test_a_page_that_drifted_is_caught_then_rewritten(tmp_path):
    page = tmp_path / "sampling.md"
    good = PAGE.read_text()
    page.write_text(good.replace("DONE --> ABORTED: abort()", "DONE --> WAITING: complete()"))
    stale = run("--check", "--page", str(page))
    assert stale.returncode == 1 and "run: python scripts/state_diagram.py" in stale.stderr
    assert run("--page", str(page)).returncode == 0
    assert page.read_text() == good


def test_a_page_without_the_markers_is_an_error(tmp_path):
    page = tmp_path / "other.md"
    page.write_text("# no diagram here\n")
    done = run("--page", str(page))
    assert done.returncode == 2 and "marker" in done.stderr and page.read_text() == "# no diagram here\n"


def test_the_diagram_has_one_labelled_arrow_per_pair_of_states_the_table_links():
    arrows = [line.strip() for line in mermaid().splitlines() if "-->" in line and "[*]" not in line]
    pairs = {(s, t) for s, ops in TRANSITIONS.items() for targets in ops.values() for t in targets}
    assert len(arrows) == len(pairs)
    for s, t in pairs:
        ops = [op for op in OPERATIONS if t in TRANSITIONS[s].get(op, ())]
        assert f"{s} --> {t}: {', '.join(op + '()' for op in ops)}" in arrows
    assert "NEEDS_WAVE --> DONE" not in mermaid()  # kept <= remaining: a step needing a wave is never done
    assert {f"{s} --> [*]" for s in (State.ABORTED, State.FAILED)} <= {line.strip() for line in mermaid().splitlines()}
