"""The slime harness runs slime's real code from the checkout named by ``SLIME_SRC``.

Without ``SLIME_SRC`` a developer's ``make test`` leaves out the tests that need slime's code
(those using the ``slime_src`` fixture) and says so in one line at the end ("SKIPPED ... slime harness tests: SLIME_SRC is not set ..."); in CI
(``CI=true``) a missing or broken ``SLIME_SRC`` fails, never passes silently.

slime's children (the legs, the episodes) end with ``os._exit``, which skips the clean-up of the
temporary folders wandb makes when slime imports it: while a test of this folder (and its fixtures)
runs, ``TMPDIR`` names a folder of pytest's, so they stay out of /tmp.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SKIPPED = pytest.StashKey[int]()
CHILDREN_TMPDIR = pytest.StashKey[Path]()
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
        if hasattr(config, "workeroutput"):  # an xdist worker: the line is the controller's to print (tests/conftest.py)
            config.workeroutput["summary_lines"] = [f"SKIPPED {len(mine)} slime harness tests: {SKIP_REASON}"]


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


@pytest.fixture(scope="session", autouse=True)
def children_tmpdir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The children's ``TMPDIR``, made before this folder's first fixture (set from here on by the hooks below)."""
    folder = request.config.stash[CHILDREN_TMPDIR] = tmp_path_factory.mktemp("children-tmp")
    tempfile.gettempdir()  # this process keeps its own (Python reads TMPDIR once, at the first use)
    os.environ["TMPDIR"] = str(folder)  # restored when this phase ends
    return folder


@contextlib.contextmanager
def children_tmpdir_set(config: pytest.Config) -> Iterator[None]:
    """``TMPDIR`` of this folder's children for one test phase (once the fixture above made it); then the previous value."""
    before = os.environ.get("TMPDIR")
    folder = config.stash.get(CHILDREN_TMPDIR, None)
    if folder is not None:
        os.environ["TMPDIR"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with children_tmpdir_set(item.config):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with children_tmpdir_set(item.config):
        return (yield)
