"""Full-text product search: SQLite FTS5 ranked by BM25 with column weights.

A query is normalized (NFKC, casefold, punctuation to spaces, money and stop
words dropped, see text.py) and its tokens are OR-ed, so a long instruction
still finds products that match only part of it; BM25 puts the best matches
first and ties fall back to the product id (= rowid order, see catalog.py).
The top ``MAX_HITS`` row ids are cached per normalized query in a bounded LRU.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from shopsimrl.env.text import query_tokens

FTS_TABLE = "search_index"
FTS_COLUMNS = ("title", "brand", "category", "model", "attributes", "options", "bullets")
COLUMN_WEIGHTS = (3.0, 2.0, 2.0, 2.5, 1.5, 1.2, 0.8)
MAX_HITS = 150
PAGE_SIZE = 20
MAX_QUERY_CHARS = 512

COMMON_FRACTION = 0.03  # terms in more than 3% of products get a score bound (see ranked_search)
_WEIGHTS = ", ".join(map(str, COLUMN_WEIGHTS))
_RANKED_SQL = (
    f"SELECT rowid, bm25({FTS_TABLE}, {_WEIGHTS}) AS score FROM {FTS_TABLE} "
    f"WHERE {FTS_TABLE} MATCH ? ORDER BY score, rowid LIMIT ?"
)


def fts_schema() -> str:
    """Contentless FTS5 table: only row ids come back, the products table holds the text."""
    return (f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5({', '.join(FTS_COLUMNS)}, "
            "content='', tokenize='unicode61 remove_diacritics 2')")


def _or(tokens: list[str]) -> str:
    # Each token is quoted so nothing in it is read as FTS5 syntax.
    return " OR ".join(f'"{t}"' for t in tokens)


@dataclass(frozen=True)
class TermBounds:
    """Document count and best single-term BM25 score of every *common* term.

    ``max_score[t]`` is the largest contribution term ``t`` makes to any product's
    score in any query (BM25 sums independent per-phrase terms with the same idf),
    which is what lets ranked_search skip products that match only common terms.
    """

    n_docs: int
    df: dict[str, int]
    max_score: dict[str, float]

    @classmethod
    def load(cls, conn: sqlite3.Connection) -> TermBounds:
        n_docs = conn.execute("SELECT count(*) FROM products").fetchone()[0]
        df: dict[str, int] = {}
        max_score: dict[str, float] = {}
        for term, count, score in conn.execute("SELECT term, df, max_score FROM term_bounds"):
            df[term] = count
            max_score[term] = score
        return cls(n_docs, df, max_score)


def compute_term_bounds(conn: sqlite3.Connection) -> list[tuple[str, int, float]]:
    """(term, df, max score) for every term found in more than COMMON_FRACTION of products."""
    n_docs = conn.execute("SELECT count(*) FROM products").fetchone()[0]
    conn.execute(f"CREATE VIRTUAL TABLE temp.term_vocab USING fts5vocab(main, {FTS_TABLE}, 'row')")
    try:
        common = conn.execute("SELECT term, doc FROM temp.term_vocab WHERE doc > ?",
                              (COMMON_FRACTION * n_docs,)).fetchall()
    finally:
        conn.execute("DROP TABLE temp.term_vocab")
    rows = []
    for term, count in common:
        best = conn.execute(_RANKED_SQL, (_or([term]), 1)).fetchone()
        rows.append((term, count, -best[1]))
    return rows


def ranked_search(conn: sqlite3.Connection, tokens: list[str], bounds: TermBounds | None,
                  limit: int = MAX_HITS) -> tuple[int, ...]:
    """Row ids of the ``limit`` best products for the OR of ``tokens``: by BM25, ties by rowid.

    Exactly the result of the plain OR query, computed faster (MaxScore): the
    products matching at least one rare token are ranked with two queries,
    ``(common) AND (rare)`` and ``(rare) NOT (common)``, whose BM25 still sums
    every token.  Products matching only common tokens cannot score more than
    the sum of those tokens' bounds, so when the last kept score beats it they
    are never scored at all; otherwise a third query ranks them too.  Tokens are
    put in one canonical order so every query adds the same floating-point
    terms in the same order as the plain query would.
    """
    if not tokens:
        return ()
    df = bounds.df if bounds is not None else {}
    ordered = canonical_order(tokens, bounds)
    common = [t for t in ordered if t in df]
    rare = [t for t in ordered if t not in df]
    if not common or not rare:
        return tuple(r[0] for r in conn.execute(_RANKED_SQL, (_or(common + rare), limit)))
    common_q, rare_q = _or(common), _or(rare)
    hits = conn.execute(_RANKED_SQL, (f"({common_q}) AND ({rare_q})", limit)).fetchall()
    hits += conn.execute(_RANKED_SQL, (f"({rare_q}) NOT ({common_q})", limit)).fetchall()
    hits.sort(key=lambda r: (r[1], r[0]))
    del hits[limit:]
    ceiling = sum(bounds.max_score[t] for t in common) * (1 + 1e-9) if bounds else 0.0
    if len(hits) < limit or -hits[-1][1] <= ceiling:
        hits += conn.execute(_RANKED_SQL, (f"({common_q}) NOT ({rare_q})", limit)).fetchall()
        hits.sort(key=lambda r: (r[1], r[0]))
        del hits[limit:]
    return tuple(r[0] for r in hits)


def canonical_order(tokens: list[str], bounds: TermBounds | None) -> list[str]:
    """Common tokens by falling document count, then rare tokens alphabetically."""
    df = bounds.df if bounds is not None else {}
    return sorted((t for t in tokens if t in df), key=lambda t: (-df[t], t)) + sorted(t for t in tokens if t not in df)


def plain_search(conn: sqlite3.Connection, tokens: list[str], bounds: TermBounds | None,
                 limit: int = MAX_HITS) -> tuple[int, ...]:
    """The reference: one OR query scoring every matching product (what ranked_search equals)."""
    if not tokens:
        return ()
    return tuple(r[0] for r in conn.execute(_RANKED_SQL, (_or(canonical_order(tokens, bounds)), limit)))


@dataclass(frozen=True)
class SearchHits:
    query: str  # the normalized query (cache key)
    rowids: tuple[int, ...]  # best first, at most MAX_HITS

    def page(self, number: int, size: int = PAGE_SIZE) -> tuple[int, ...]:
        return self.rowids[(number - 1) * size: number * size]

    def num_pages(self, size: int = PAGE_SIZE) -> int:
        return max(1, -(-len(self.rowids) // size))


class SearchEngine:
    """Thread-safe search with a bounded LRU of hit lists keyed by normalized query."""

    def __init__(self, connection: Callable[[], sqlite3.Connection], *, cache_size: int = 4096,
                 max_hits: int = MAX_HITS) -> None:
        self._connection = connection
        self._bounds = TermBounds.load(connection())
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._max_hits = max_hits
        self._lock = threading.Lock()
        self.cache_hits = 0
        self.cache_misses = 0

    def search(self, query: str) -> SearchHits:
        tokens = query_tokens(query)
        key = " ".join(tokens)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
                return SearchHits(key, cached)
            self.cache_misses += 1
        rowids = ranked_search(self._connection(), tokens, self._bounds, self._max_hits)
        with self._lock:
            self._cache[key] = rowids
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return SearchHits(key, rowids)

    @property
    def cache_len(self) -> int:
        return len(self._cache)
