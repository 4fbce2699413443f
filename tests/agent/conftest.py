"""Real ShopSim catalogs for the agent tests, each built once per session into a temporary cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl.env.build import DEFAULT_PRODUCTS, DEFAULT_SEED, build_catalog

SMALL_PRODUCTS, SMALL_SEED = 2_000, 7


@pytest.fixture(scope="session")
def agent_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-shopsim-cache")


@pytest.fixture(scope="session")
def small_catalog(agent_cache: Path) -> Path:
    return build_catalog(SMALL_PRODUCTS, SMALL_SEED, agent_cache)


@pytest.fixture(scope="session")
def default_catalog(agent_cache: Path) -> Path:
    """The default-size catalog (20,000 products, default seed): about 10 s to build."""
    return build_catalog(DEFAULT_PRODUCTS, DEFAULT_SEED, agent_cache)
