"""Shared fixtures: one small catalog (2,000 products) built once per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shopsimrl.env.build import build_catalog
from shopsimrl.env.core import ShopSimEnv

SMALL_PRODUCTS = 2_000
SMALL_SEED = 7


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shopsim-cache")


@pytest.fixture(scope="session")
def small_db(cache_dir: Path) -> Path:
    return build_catalog(SMALL_PRODUCTS, SMALL_SEED, cache_dir)


@pytest.fixture()
def env(small_db: Path) -> Iterator[ShopSimEnv]:
    with ShopSimEnv(small_db, slots=4, action_limit=30, reset_timeout=2.0) as shop:
        yield shop


def first_task(env: ShopSimEnv, split: str = "train") -> str:
    return env.list_tasks(split)[0]
