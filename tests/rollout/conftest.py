"""Real-environment fixtures: one small catalog (2,000 products) built once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shopsimrl.env.build import build_catalog
from shopsimrl.env.core import ShopSimEnv

PRODUCTS = 2_000
CATALOG_SEED = 0


@pytest.fixture(scope="session")
def shop_cache(catalog_cache: Path) -> Path:
    build_catalog(PRODUCTS, CATALOG_SEED, catalog_cache)
    return catalog_cache


@pytest.fixture
def cli_cache(shop_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's in-process env finds the session catalog (no rebuild)."""
    monkeypatch.setenv("SHOPSIMRL_CACHE", str(shop_cache))
    return shop_cache


@pytest.fixture
def shop(shop_cache: Path) -> Iterator[ShopSimEnv]:
    with ShopSimEnv(build_catalog(PRODUCTS, CATALOG_SEED, shop_cache), slots=64) as env:
        yield env
