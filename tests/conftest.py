"""Fixtures shared by every test folder, and how the suite runs on several CPUs.

Catalogs: one temporary cache per run, each catalog built once.  ``build_catalog``
returns the cached file when it exists, so a folder that asks for a (products, seed)
another folder already built gets it for free.  ``no_work``: the rollout CLI must refuse
bad options before it opens an environment.

Several CPUs (``make test``: ``pytest -n auto --dist loadfile``, pytest-xdist): one worker
process per CPU this process may use, plus one, each test file on one worker, so a module's fixtures
(servers, tokenizers) are built once.  The workers share the catalog cache (``build_catalog``
holds a file lock while it builds, so one worker builds and the others wait for the file),
and the files marked ``slow`` or running slime's code start first, so the others fill the
CPUs around them.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from catalogs import SMALL_PRODUCTS, SMALL_SEED

from shopsimrl.defaults import DEFAULT_CATALOG_SEED, DEFAULT_PRODUCTS
from shopsimrl.env.build import build_catalog


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), bounded by a cgroup v2 CPU quota when one is set."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cpus
    if quota == "max":
        return cpus
    return max(1, min(cpus, math.ceil(int(quota) / int(period))))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per usable CPU plus one (a test waiting on a real process then leaves no CPU idle), and
    none on one CPU (the tests then run in this process); ``PYTEST_XDIST_AUTO_NUM_WORKERS`` (xdist's own variable)
    still sets the number."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    if chosen.isdigit():
        return int(chosen)
    cpus = usable_cpus()
    return cpus + 1 if cpus > 1 else 0


def starts_first(item: pytest.Item) -> bool:
    """Long files: marked ``slow``, or running slime's real code in child processes (the ``slime_src`` fixture)."""
    return item.get_closest_marker("slow") is not None or "slime_src" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist's workers (each collects the same list), the long files first: the longest jobs start at
    once and the short ones fill the other CPUs around them.  One process runs the tests in file order."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: not starts_first(item))  # stable: file order kept within each part


SUMMARY_LINES = pytest.StashKey[list[str]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # noqa: ANN001  (xdist's worker controller, its error)
    """Under xdist: the lines a worker asked to be said at the end (``workeroutput["summary_lines"]``), once each."""
    lines = node.config.stash.setdefault(SUMMARY_LINES, [])
    for line in getattr(node, "workeroutput", {}).get("summary_lines", ()):
        if line not in lines:
            lines.append(line)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    for line in config.stash.get(SUMMARY_LINES, []):
        terminalreporter.write_line(line, yellow=True)


@pytest.fixture(scope="session")
def catalog_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache per run: under xdist the workers' temporary folders share a parent, where the cache is."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    cache = root / "shopsim-catalogs"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def small_catalog(catalog_cache: Path) -> Path:
    """2,000 products, seed 7: about a second to build."""
    return build_catalog(SMALL_PRODUCTS, SMALL_SEED, catalog_cache)


@pytest.fixture(scope="session")
def default_catalog(catalog_cache: Path) -> Path:
    """The default-size catalog (20,000 products, default seed): several seconds to build."""
    return build_catalog(DEFAULT_PRODUCTS, DEFAULT_CATALOG_SEED, catalog_cache)


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the rollout CLI gets as far as opening an environment."""
    from shopsimrl.commands import rollout_stages

    async def forbidden(*_args: object) -> None:
        raise AssertionError("the environment was opened although the options are invalid")

    monkeypatch.setattr(rollout_stages, "open_env", forbidden)
