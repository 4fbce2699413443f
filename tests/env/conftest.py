"""Env fixtures over the session catalogs of ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from catalogs import SMALL_PRODUCTS, SMALL_SEED  # noqa: F401  (re-exported to the env tests)

from shopsimrl.env.core import ShopSimEnv


@pytest.fixture(scope="session")
def cache_dir(catalog_cache: Path) -> Path:
    return catalog_cache


@pytest.fixture(scope="session")
def small_db(small_catalog: Path) -> Path:
    return small_catalog


@pytest.fixture()
def env(small_db: Path) -> Iterator[ShopSimEnv]:
    with ShopSimEnv(small_db, slots=4, action_limit=30, reset_timeout=2.0) as shop:
        yield shop


def first_task(env: ShopSimEnv, split: str = "train") -> str:
    return env.list_tasks(split)[0]
