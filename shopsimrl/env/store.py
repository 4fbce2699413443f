"""Read side of a built catalog: products, tasks and metadata, safe across threads.

The database never changes after its build, so it is opened read-only and
``immutable`` (no locking), one connection per thread (sqlite3 connections must
not be shared between concurrent threads).  Products are immutable too and are
kept in a bounded LRU; tasks are few and are loaded once.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from shopsimrl.env.build import CatalogError, rebuild_command
from shopsimrl.env.catalog import SPLITS, Product
from shopsimrl.env.types import BadRequestError, Task, UnknownTaskError
from shopsimrl.io import BadFileError, open_regular_file

_PRODUCT_COLUMNS = ("rowid, product_id, title, brand, model, category, kind, attributes, bullets, options, "
                    "price_axis, prices, price_min, price_max, split")


class CatalogStore:
    def __init__(self, path: str | Path, *, product_cache_size: int = 50_000) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"catalog database not found: {self.path}")
        try:  # SQLite would block on a FIFO forever: regular files only
            open_regular_file(self.path, "the catalog").close()
        except BadFileError as exc:
            raise CatalogError(f"{exc}: rebuild it with: {rebuild_command(self.path)}") from None
        self._uri = f"file:{quote(str(self.path))}?mode=ro&immutable=1"
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._products: OrderedDict[int, Product] = OrderedDict()
        self._product_cache_size = product_cache_size
        self._tasks: dict[str, Task] = {}
        self._task_product: dict[str, int] = {}
        self._splits: dict[str, list[str]] = {split: [] for split in SPLITS}
        try:
            self._load()
        except (sqlite3.DatabaseError, ValueError, KeyError, TypeError) as exc:  # malformed, truncated, foreign
            self.close()
            raise CatalogError(f"the catalog {self.path} is damaged ({exc}): rebuild it with: "
                               f"{rebuild_command(self.path)}") from None

    def _load(self) -> None:
        """Metadata and tasks, checked against each other (a damaged file fails here, not mid-run)."""
        conn = self.connection()
        self.meta: dict[str, Any] = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        for task_id, split, instruction, goal, rowid in conn.execute(
                "SELECT task_id, split, instruction, goal, product_rowid FROM tasks ORDER BY split, idx"):
            self._tasks[task_id] = Task(task_id=task_id, split=split, instruction=instruction, goal=json.loads(goal))
            self._task_product[task_id] = rowid
            self._splits[split].append(task_id)
        (products,) = conn.execute("SELECT max(rowid) FROM products").fetchone()
        if products != self.meta["products"] or len(self._tasks) != self.meta["tasks"]:
            raise ValueError(f"it holds {products} products and {len(self._tasks)} tasks, its metadata says "
                             f"{self.meta['products']} and {self.meta['tasks']}")

    # -- connections ---------------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        """This thread's read-only connection (opened on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            conn.execute("PRAGMA cache_size=-32768")
            conn.execute("PRAGMA mmap_size=268435456")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # -- products ------------------------------------------------------------------------
    def products(self, rowids: Iterable[int]) -> list[Product]:
        """Products in the order of ``rowids`` (cached; misses fetched in one query)."""
        wanted = list(rowids)
        found: dict[int, Product] = {}
        with self._lock:
            for rowid in wanted:
                product = self._products.get(rowid)
                if product is not None:
                    self._products.move_to_end(rowid)
                    found[rowid] = product
        missing = [r for r in wanted if r not in found]
        if missing:
            marks = ", ".join("?" * len(missing))
            rows = self.connection().execute(
                f"SELECT {_PRODUCT_COLUMNS} FROM products WHERE rowid IN ({marks})", missing).fetchall()
            fresh = {row[0]: Product.from_row(row) for row in rows}
            found.update(fresh)
            with self._lock:
                for rowid, product in fresh.items():
                    self._products[rowid] = product
                while len(self._products) > self._product_cache_size:
                    self._products.popitem(last=False)
        return [found[r] for r in wanted if r in found]

    def product(self, rowid: int) -> Product:
        found = self.products([rowid])
        if not found:
            raise KeyError(rowid)
        return found[0]

    @property
    def product_count(self) -> int:
        return int(self.meta["products"])

    # -- tasks ---------------------------------------------------------------------------
    def task(self, task_id: str) -> Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise UnknownTaskError(f"unknown task {task_id!r}")
        return task

    def task_product(self, task_id: str) -> Product:
        """The goal product of a task (for oracles and tests; agents never see it)."""
        self.task(task_id)
        return self.product(self._task_product[task_id])

    def task_ids(self, split: str) -> list[str]:
        if split not in self._splits:
            raise BadRequestError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        return list(self._splits[split])

    def task_counts(self) -> dict[str, int]:
        return {split: len(ids) for split, ids in self._splits.items()}
