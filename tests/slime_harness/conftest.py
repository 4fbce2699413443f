"""The slime harness runs slime's real code from the checkout named by ``SLIME_SRC``.

Without ``SLIME_SRC`` a developer's ``make test`` leaves out the tests that need slime's code
(those using the ``slime_src`` fixture) and says so in one line at the end ("SKIPPED ... slime harness tests: SLIME_SRC is not set ..."); in CI
(``CI=true``) a missing or broken ``SLIME_SRC`` fails, never passes silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SKIPPED = pytest.StashKey[int]()
SKIP_REASON = ("slime harness not run: SLIME_SRC is not set (point it at a slime checkout, e.g. "
               "SLIME_SRC=/path/to/slime make test; .ci/run sets it)")


HERE = Path(__file__).resolve().parent


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def pytest_collection_modifyitems(config, items):
    """No SLIME_SRC outside CI: leave out the harness's tests that run slime's code (reported in one line by the
    summary below); the ones that need no slime (fake checkouts) always run."""
    if os.environ.get("SLIME_SRC") or _in_ci():
        return
    mine = [item for item in items if HERE in Path(str(item.fspath)).resolve().parents
            and "slime_src" in getattr(item, "fixturenames", ())]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if item not in mine]
        config.stash[SKIPPED] = len(mine)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = config.stash.get(SKIPPED, 0)
    if skipped:
        terminalreporter.write_line(f"SKIPPED {skipped} slime harness tests: {SKIP_REASON}", yellow=True)


@pytest.fixture(scope="session")
def slime_src() -> Path:
    raw = os.environ.get("SLIME_SRC", "")
    if not raw:
        if _in_ci():
            pytest.fail("CI=true but SLIME_SRC is not set: the slime harness must run in CI")
        pytest.skip(SKIP_REASON)
    path = Path(raw).expanduser().resolve()
    if not (path / "slime" / "__init__.py").is_file() or not (path / "train.py").is_file():
        pytest.fail(f"SLIME_SRC={raw} is not a slime checkout (no slime/__init__.py and train.py)")
    return path
