"""Search: query normalization, exact BM25 ranking, paging and the bounded hit cache."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from shopsimrl.env.search import (
    MAX_HITS,
    SearchEngine,
    TermBounds,
    plain_search,
    ranked_search,
)
from shopsimrl.env.store import CatalogStore
from shopsimrl.env.text import normalize_query, query_tokens


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Waterproof HIKING-Boots!!", "waterproof hiking boots"),
        ("ｗａｔｅｒｐｒｏｏｆ boots", "waterproof boots"),  # NFKC folds full-width letters
        ("STRASSE straße", "strasse"),  # casefold, then deduplicated
        ("boots under $40", "boots"),
        ("boots, price lower than 40.00 dollars", "boots"),
        ("boots between $30 and $40", "boots"),
        ("boots $30-40", "boots"),
        ("boots for 25 usd", "boots"),
        ("boots usd 25", "boots"),
        ("size 10.5 boots", "size 10 5 boots"),
        ("I need the a an of", ""),
    ],
)
def test_query_normalization(query: str, expected: str) -> None:
    assert normalize_query(query) == expected


def test_query_tokens_are_capped() -> None:
    assert len(query_tokens(" ".join(f"word{i}" for i in range(100)))) == 32


@pytest.fixture(scope="module")
def conn(small_db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{small_db}?mode=ro", uri=True)


def test_ranked_search_equals_the_plain_or_query(conn: sqlite3.Connection) -> None:
    bounds = TermBounds.load(conn)
    instructions = [r[0] for r in conn.execute("SELECT instruction FROM tasks")]
    rng = random.Random(0)
    queries = instructions + ["black", "two pack black free", "usb-c gan", "x y z nothing"]
    queries += [" ".join(rng.sample(query_tokens(q), k=min(3, len(query_tokens(q))))) for q in instructions[:80]]
    for query in queries:
        tokens = query_tokens(query)
        assert ranked_search(conn, tokens, bounds) == plain_search(conn, tokens, bounds), query


def test_every_hit_matches_a_token_and_hits_are_capped(conn: sqlite3.Connection) -> None:
    bounds = TermBounds.load(conn)
    hits = ranked_search(conn, query_tokens("black waterproof boots"), bounds)
    assert len(hits) == MAX_HITS and len(set(hits)) == MAX_HITS
    assert ranked_search(conn, [], bounds) == ()
    assert ranked_search(conn, ["qqqqqq"], bounds) == ()


def test_best_match_comes_first(small_db: Path) -> None:
    store = CatalogStore(small_db)
    engine = SearchEngine(store.connection)
    product = store.product(123)
    hits = engine.search(f"{product.title} {product.model}")
    assert hits.rowids[0] == product.rowid
    store.close()


def test_hit_cache_is_an_lru_with_a_cap(small_db: Path) -> None:
    store = CatalogStore(small_db)
    engine = SearchEngine(store.connection, cache_size=3)
    engine.search("black boots")
    engine.search("BLACK, boots!")  # same normalized query
    assert (engine.cache_hits, engine.cache_misses) == (1, 1)
    for q in ("red", "navy", "teal", "olive"):
        engine.search(q)
    assert engine.cache_len == 3
    engine.search("black boots")  # evicted long ago
    assert engine.cache_misses == 6
    store.close()


def test_paging(small_db: Path) -> None:
    store = CatalogStore(small_db)
    hits = SearchEngine(store.connection).search("black")
    assert hits.num_pages() == 8 and len(hits.page(1)) == 20 and len(hits.page(8)) == 10
    assert hits.page(1) + hits.page(2) == hits.rowids[:40]
    store.close()
