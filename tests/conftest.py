"""Fixtures shared by every test folder.

Catalogs: one temporary cache per session, each catalog built once.  ``build_catalog``
returns the cached file when it exists, so a folder that asks for a (products, seed)
another folder already built gets it for free.  ``no_work``: the rollout CLI must refuse
bad options before it opens an environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogs import SMALL_PRODUCTS, SMALL_SEED

from shopsimrl.env.build import build_catalog
from shopsimrl.env.defaults import DEFAULT_PRODUCTS, DEFAULT_SEED


@pytest.fixture(scope="session")
def catalog_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shopsim-catalogs")


@pytest.fixture(scope="session")
def small_catalog(catalog_cache: Path) -> Path:
    """2,000 products, seed 7: about a second to build."""
    return build_catalog(SMALL_PRODUCTS, SMALL_SEED, catalog_cache)


@pytest.fixture(scope="session")
def default_catalog(catalog_cache: Path) -> Path:
    """The default-size catalog (20,000 products, default seed): several seconds to build."""
    return build_catalog(DEFAULT_PRODUCTS, DEFAULT_SEED, catalog_cache)


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the rollout CLI gets as far as opening an environment."""
    from shopsimrl.commands import rollout_stages

    async def forbidden(*_args: object) -> None:
        raise AssertionError("the environment was opened although the options are invalid")

    monkeypatch.setattr(rollout_stages, "open_env", forbidden)
