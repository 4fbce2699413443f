"""Catalog and task generation: determinism, structure, splits, solvable budgets, atomic builds."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from shopsimrl.env import build as build_mod
from shopsimrl.env.build import build_catalog, catalog_path, default_cache_dir, split_quotas
from shopsimrl.env.catalog import CatalogGenerator, Product
from shopsimrl.env.reward import budget_limit
from shopsimrl.env.store import CatalogStore

from .conftest import SMALL_PRODUCTS, SMALL_SEED

ID_PATTERN = re.compile(r"^B0[0-9A-Z]{8}$")


def _rows(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def test_same_seed_same_catalog_other_seed_other_catalog() -> None:
    a = [p.to_row() for p in CatalogGenerator(3).products(500)]
    b = [p.to_row() for p in CatalogGenerator(3).products(500)]
    c = [p.to_row() for p in CatalogGenerator(4).products(500)]
    assert a == b
    assert a != c and {r[1] for r in a}.isdisjoint({r[1] for r in c})


def test_rebuilt_database_is_identical_for_a_seed(small_db: Path, tmp_path: Path) -> None:
    again = build_catalog(SMALL_PRODUCTS, SMALL_SEED, tmp_path)
    for sql in ("SELECT * FROM products ORDER BY rowid", "SELECT * FROM tasks ORDER BY task_id"):
        assert _rows(small_db, sql) == _rows(again, sql)
    other = build_catalog(SMALL_PRODUCTS, SMALL_SEED + 1, tmp_path)
    assert other != again
    assert _rows(other, "SELECT product_id FROM products") != _rows(again, "SELECT product_id FROM products")


def test_products_are_well_formed(small_db: Path) -> None:
    store = CatalogStore(small_db)
    products = store.products(range(1, SMALL_PRODUCTS + 1))
    assert len(products) == SMALL_PRODUCTS
    ids = [p.product_id for p in products]
    assert all(ID_PATTERN.match(i) for i in ids) and len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # id order is rowid order: BM25 ties break by product id
    assert len({p.category for p in products}) >= 20
    for p in products:
        assert " › " in p.category and p.brand in p.title and p.attributes and p.bullets
        assert p.price_axis is None or p.price_axis in p.axes  # at most one price axis
        if p.price_axis is None:
            assert len(p.prices) == 1 and p.prices[0] > 0
        else:
            assert len(p.prices) == len(p.axis_values(p.price_axis))
    with_unknown = [p for p in products if None in p.prices]
    assert with_unknown, "some SKUs should have an unknown price"
    assert any(len(p.axes) >= 2 for p in products)
    store.close()


def test_tasks_point_at_a_real_solvable_sku(small_db: Path) -> None:
    store = CatalogStore(small_db)
    counts = store.task_counts()
    assert counts == split_quotas(sum(counts.values()))  # 80/10/10
    kinds = set()
    for split in ("train", "val", "test"):
        for task_id in store.task_ids(split):
            task = store.task(task_id)
            goal, product = task.goal, store.task_product(task_id)
            assert task.split == split == product.split
            assert goal["product_id"] == product.product_id and goal["category"] == product.category
            assert goal["attributes"] and set(goal["attributes"]) <= set(product.attributes)
            for axis, value in goal["options"].items():
                assert value in product.axis_values(axis)
            limit = budget_limit(goal["budget"])
            kinds.add(goal["budget"]["kind"])
            if limit is not None:
                assert product.price_axis is None or product.price_axis in goal["options"]
                price = product.sku_price(goal["options"])
                assert price is not None and price <= limit
                assert goal["budget"]["text"] and goal["budget"]["text"] in task.instruction
            assert product.kind in task.instruction
    assert kinds == {"none", "hard", "approx", "range"}
    store.close()


def test_no_goal_product_shared_between_splits(small_db: Path) -> None:
    rows = _rows(small_db, "SELECT split, product_rowid FROM tasks")
    by_split: dict[str, set[int]] = {}
    for split, rowid in rows:
        by_split.setdefault(split, set()).add(rowid)
    assert by_split["train"].isdisjoint(by_split["val"]) and by_split["val"].isdisjoint(by_split["test"])
    assert by_split["train"].isdisjoint(by_split["test"])
    assert len(rows) == sum(len(s) for s in by_split.values())


def test_some_distractors_look_like_the_goal(small_db: Path) -> None:
    store = CatalogStore(small_db)
    products = store.products(range(1, SMALL_PRODUCTS + 1))
    similar = 0
    for task_id in store.task_ids("train")[:50]:
        goal = store.task_product(task_id)
        similar += any(p.rowid != goal.rowid and p.category == goal.category and p.kind == goal.kind
                       and set(p.attributes) & set(goal.attributes) for p in products)
    assert similar >= 40
    store.close()


def test_build_reuses_the_cached_file(small_db: Path, cache_dir: Path) -> None:
    before = small_db.stat().st_mtime_ns
    assert build_catalog(SMALL_PRODUCTS, SMALL_SEED, cache_dir) == small_db
    assert small_db.stat().st_mtime_ns == before
    assert small_db == catalog_path(SMALL_PRODUCTS, SMALL_SEED, cache_dir)


def test_a_crashed_build_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(build_mod, "_select_tasks", boom)
    with pytest.raises(RuntimeError):
        build_catalog(300, 1, tmp_path)
    assert not catalog_path(300, 1, tmp_path).exists()
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".tmp", ".sqlite")]


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHOPSIMRL_CACHE", str(tmp_path / "from-env"))
    assert default_cache_dir() == tmp_path / "from-env"
    assert default_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("SHOPSIMRL_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "shopsimrl"


def test_build_rejects_silly_sizes(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        build_catalog(5, 0, tmp_path)
    with pytest.raises(ValueError):
        build_catalog(1_000_001, 0, tmp_path)


def test_meta_records_the_build(small_db: Path) -> None:
    meta = {k: json.loads(v) for k, v in _rows(small_db, "SELECT key, value FROM meta")}
    assert meta["seed"] == SMALL_SEED and meta["products"] == SMALL_PRODUCTS and meta["schema_version"] >= 1
    assert sum(meta["task_counts"].values()) == meta["tasks"]


def test_product_row_round_trip() -> None:
    product = next(iter(CatalogGenerator(0).products(1)))
    assert Product.from_row(product.to_row()) == product
