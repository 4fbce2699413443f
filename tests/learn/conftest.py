"""The learner's tests run the main job on the small real catalog (2,000 products), built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl.env.build import build_catalog

PRODUCTS = 2_000
CATALOG_SEED = 0


@pytest.fixture
def cli_cache(catalog_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The rollout command's in-process env finds the session's catalog (no rebuild)."""
    build_catalog(PRODUCTS, CATALOG_SEED, catalog_cache)
    monkeypatch.setenv("SHOPSIMRL_CACHE", str(catalog_cache))
    return catalog_cache
