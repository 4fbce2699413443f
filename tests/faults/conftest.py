"""Fixtures of the fault suite: every process they start is stopped by its PID, also when a test fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.processes import PRODUCTS, EnvServer, Rollout

from shopsimrl.env.build import build_catalog


@pytest.fixture(scope="session")
def fault_cache(catalog_cache: Path) -> Path:
    build_catalog(PRODUCTS, 0, catalog_cache)
    return catalog_cache


@pytest.fixture
def servers(fault_cache: Path) -> Iterator[list[EnvServer]]:
    """Start servers with ``servers.append(EnvServer(...).start())``; all are stopped at the end."""
    started: list[EnvServer] = []
    try:
        yield started
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def server(servers: list[EnvServer], fault_cache: Path) -> EnvServer:
    servers.append(EnvServer(fault_cache, "--slots", "48").start())
    return servers[-1]


@pytest.fixture
def rollouts() -> Iterator[list[Rollout]]:
    started: list[Rollout] = []
    try:
        yield started
    finally:
        for rollout in started:
            rollout.stop()


