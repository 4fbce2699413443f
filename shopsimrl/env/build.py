"""Building the catalog database: products + search index + tasks in one SQLite file.

The file name encodes (schema version, seed, products, tasks), so another seed or
size builds another file and an existing one is simply reused.  The build writes
to a hidden temporary file in the cache folder and renames it only once complete,
so a crash never leaves a half-built database behind; a lock file keeps two
processes from building the same catalog at once.

A cache can still be damaged afterwards (a full disk, a copy cut short, a stray
write), so the build also writes the file's SHA-256 next to it (``<name>.sha256``,
in ``sha256sum`` format) and every later use checks it first: a damaged or
unchecked file is rebuilt, with a message, instead of serving wrong products.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import random
import re
import secrets
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from shopsimrl import __version__
from shopsimrl.defaults import DEFAULT_CATALOG_SEED, DEFAULT_PRODUCTS
from shopsimrl.env.catalog import SPLITS, CatalogGenerator, Product
from shopsimrl.env.search import MAX_HITS, TermBounds, compute_term_bounds, fts_schema, ranked_search
from shopsimrl.env.tasks import make_goal, make_instruction
from shopsimrl.env.text import query_tokens
from shopsimrl.errors import Interrupted, Refusal
from shopsimrl.io import (
    BadFileError,
    LockFileError,
    atomic_write_text,
    open_lock_file,
    open_regular_file,
    printable,
    read_bounded_text,
)

SCHEMA_VERSION = 1
MIN_PRODUCTS = 10  # fewer leave no family of look-alikes and too few tasks
MAX_PRODUCTS = 1_000_000
SPLIT_SHARES = (0.8, 0.1, 0.1)
CACHE_ENV_VAR = "SHOPSIMRL_CACHE"
_CHUNK = 5_000

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)


class CatalogError(Refusal, ValueError):
    """A catalog that cannot be used or built (damaged, no checksum, a full disk); the message says what to do."""


class CatalogLockError(LockFileError, CatalogError):
    """The catalog's lock file is a symlink, a hard link or not a plain file: refused (never followed), and
    refused as bad input (one line, exit 2) by every command that builds or opens a catalog."""


CHECKSUM_LIMIT = 4096  # a sha256sum line: 64 hex digits, two spaces, the file's name
_SHA256 = re.compile(r"[0-9a-f]{64}")


class BuildCancelled(Interrupted):
    """The build was cancelled (``cancel`` set): its temporary file is removed, the cache left as it was."""


_CANCEL_CHECK_OPS = 16_384  # SQLite VM steps between two looks at ``cancel`` (well under a millisecond)

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE products (
        rowid INTEGER PRIMARY KEY, product_id TEXT NOT NULL UNIQUE, title TEXT NOT NULL, brand TEXT NOT NULL,
        model TEXT NOT NULL, category TEXT NOT NULL, kind TEXT NOT NULL, attributes TEXT NOT NULL,
        bullets TEXT NOT NULL, options TEXT NOT NULL, price_axis TEXT, prices TEXT NOT NULL,
        price_min REAL, price_max REAL, split TEXT NOT NULL)""",
    fts_schema(),
    """CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY, split TEXT NOT NULL, idx INTEGER NOT NULL, instruction TEXT NOT NULL,
        goal TEXT NOT NULL, product_rowid INTEGER NOT NULL)""",
    "CREATE TABLE term_bounds (term TEXT PRIMARY KEY, df INTEGER NOT NULL, max_score REAL NOT NULL)",
)
_INSERT_PRODUCT = "INSERT INTO products VALUES (" + ", ".join("?" * 15) + ")"
_INSERT_FTS = "INSERT INTO search_index (rowid, title, brand, category, model, attributes, options, bullets) " \
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


def default_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The argument, else $SHOPSIMRL_CACHE, else ~/.cache/shopsimrl."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "shopsimrl"


def default_task_count(products: int) -> int:
    """One task per ten products, capped at 2,000: each task costs a verifying search at build time."""
    return max(50, min(products // 10, 2_000))


def catalog_path(products: int = DEFAULT_PRODUCTS, seed: int = DEFAULT_CATALOG_SEED,
                 cache_dir: str | os.PathLike[str] | None = None, *, tasks: int | None = None) -> Path:
    n_tasks = default_task_count(products) if tasks is None else tasks
    return default_cache_dir(cache_dir) / f"shopsim-v{SCHEMA_VERSION}-seed{seed}-p{products}-t{n_tasks}.sqlite"


def split_quotas(n_tasks: int) -> dict[str, int]:
    train = round(n_tasks * SPLIT_SHARES[0])
    val = round(n_tasks * SPLIT_SHARES[1])
    return {"train": train, "val": val, "test": n_tasks - train - val}


def build_catalog(products: int = DEFAULT_PRODUCTS, seed: int = DEFAULT_CATALOG_SEED,
                  cache_dir: str | os.PathLike[str] | None = None, *, tasks: int | None = None,
                  force: bool = False, progress: ProgressFn | None = None,
                  cancel: threading.Event | None = None) -> Path:
    """Return the path of the catalog database for (products, seed), building it when missing or damaged.

    ``cancel``: set it (from another thread) to stop a build within a fraction of a second
    (:class:`BuildCancelled`).  A build that fails (a full disk) raises :class:`CatalogError`.
    """
    if not MIN_PRODUCTS <= products <= MAX_PRODUCTS:
        raise ValueError(f"products must be within {MIN_PRODUCTS}..{MAX_PRODUCTS}, got {products}")
    n_tasks = default_task_count(products) if tasks is None else tasks
    path = catalog_path(products, seed, cache_dir, tasks=n_tasks)
    if not force and _usable(path):
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CatalogError(f"cannot make the catalog folder {path.parent} ({exc.strerror or exc}): choose another "
                           f"folder (--cache-dir or ${CACHE_ENV_VAR})") from exc
    if not os.access(path.parent, os.W_OK | os.X_OK):  # read-only (root too: EROFS) or not ours
        raise CatalogError(f"cannot write in the catalog folder {path.parent}: choose another folder "
                           f"(--cache-dir or ${CACHE_ENV_VAR})")
    try:
        lock_fd = open_lock_file(path.with_name(f".{path.name}.lock"))  # no symlink followed
    except LockFileError as exc:
        raise CatalogLockError(str(exc)) from None
    except OSError as exc:
        raise CatalogError(f"cannot open the catalog's lock file in {path.parent} ({exc.strerror or exc}): choose "
                           f"another folder (--cache-dir or ${CACHE_ENV_VAR})") from None
    with os.fdopen(lock_fd, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not force and _usable(path, say=True):
            return path  # built by another process while we waited
        if path.is_dir() and not path.is_symlink():
            raise CatalogError(f"the catalog {printable(path)} is a directory: remove it (or choose another folder: "
                               f"--cache-dir or ${CACHE_ENV_VAR})")
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # we hold the lock: no build of ours is running
            stale.unlink(missing_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            _write_database(tmp, products, seed, n_tasks, progress, cancel or threading.Event())
            _write_checksum(path, _sha256(tmp))  # a checksum without its file fails the check: rebuilt
            os.replace(tmp, path)
        except (OSError, sqlite3.Error) as exc:
            if cancel is not None and cancel.is_set():
                raise BuildCancelled() from None
            reason = getattr(exc, "strerror", None) or str(exc)
            raise CatalogError(f"cannot build the catalog in {path.parent} ({reason}): free some space there or "
                               f"choose another folder (--cache-dir or ${CACHE_ENV_VAR})") from exc
        finally:
            tmp.unlink(missing_ok=True)
    return path


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def rebuild_command(path: Path) -> str:
    """The command that rebuilds the catalog file ``path`` (its name says seed, products and tasks)."""
    found = re.fullmatch(r"shopsim-v\d+-seed(-?\d+)-p(\d+)-t(\d+)\.sqlite", path.name)
    what = f"--products {found[2]} --seed {found[1]} --tasks {found[3]} " if found else ""
    return f"shopsimrl env build {what}--cache-dir {path.parent} --force"


def verify_catalog(path: str | os.PathLike[str]) -> None:
    """Raise :class:`CatalogError` unless ``path`` matches the SHA-256 its build wrote next to it.

    Both files are read bounded: the checksum is a regular file of at most :data:`CHECKSUM_LIMIT` bytes
    holding 64 hex digits, the catalog a regular file (a FIFO or a device there, which would block the
    check forever or feed it without end, counts as damaged)."""
    path = Path(path)
    try:
        words = read_bounded_text(checksum_path(path), CHECKSUM_LIMIT, "checksum file").split()
    except BadFileError as exc:
        if not checksum_path(path).exists() and not checksum_path(path).is_symlink():
            raise CatalogError(f"the catalog {printable(path)} has no checksum (built by an older shopsimrl, or the "
                               f"build was cut short): rebuild it with: {rebuild_command(path)}") from None
        raise CatalogError(f"the catalog {printable(path)} has no usable checksum ({exc}): rebuild it with: "
                           f"{rebuild_command(path)}") from None
    if not words or not _SHA256.fullmatch(words[0]):
        raise CatalogError(f"the catalog {printable(path)} has no usable checksum (its checksum file does not start "
                           f"with a SHA-256): rebuild it with: {rebuild_command(path)}")
    expected = words[0]
    try:
        actual = _sha256(path)
    except BadFileError as exc:
        raise CatalogError(f"{exc}: rebuild it with: {rebuild_command(path)}") from None
    except OSError as exc:
        raise CatalogError(f"the catalog {printable(path)} cannot be read ({exc.strerror or exc}): rebuild it with: "
                           f"{rebuild_command(path)}") from None
    if actual != expected:
        raise CatalogError(f"the catalog {path} is damaged (its SHA-256 is not the one written when it was built): "
                           f"rebuild it with: {rebuild_command(path)}")


def _usable(path: Path, *, say: bool = False) -> bool:
    """True when ``path`` exists and passes :func:`verify_catalog`; ``say``: tell stderr why it is rebuilt."""
    if not path.exists():
        return False
    try:
        verify_catalog(path)
    except CatalogError as exc:
        if say:
            reason = str(exc).split(": rebuild it with:")[0]
            print(f"shopsimrl: {reason}; rebuilding it", file=sys.stderr, flush=True)
        return False
    return True


def _sha256(path: Path) -> str:
    """The SHA-256 of a regular file (anything else: :class:`~shopsimrl.io.BadFileError`)."""
    digest = hashlib.sha256()
    with open_regular_file(path, "the catalog") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_checksum(path: Path, hexdigest: str) -> None:
    atomic_write_text(checksum_path(path), f"{hexdigest}  {path.name}\n")


def _write_database(path: Path, products: int, seed: int, n_tasks: int, progress: ProgressFn | None,
                    cancel: threading.Event) -> None:
    started = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.set_progress_handler(cancel.is_set, _CANCEL_CHECK_OPS)  # True interrupts the statement running
    try:
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "temp_store=MEMORY", "cache_size=-262144"):
            conn.execute(f"PRAGMA {pragma}")
        conn.execute("BEGIN")
        for statement in _SCHEMA:
            conn.execute(statement)
        candidates = _insert_products(conn, products, seed, n_tasks, progress, cancel)
        if progress:
            progress("index", 0, 1)
        conn.execute("INSERT INTO search_index (search_index) VALUES ('optimize')")
        conn.executemany("INSERT INTO term_bounds VALUES (?, ?, ?)", compute_term_bounds(conn))
        conn.execute("COMMIT")
        if progress:
            progress("index", 1, 1)
        task_rows, rejected = _select_tasks(path, candidates, seed, n_tasks, progress, cancel)
        counts = {split: sum(1 for row in task_rows if row[1] == split) for split in SPLITS}
        meta: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "seed": seed, "products": products, "tasks": len(task_rows),
            "task_counts": counts, "rejected_goals": rejected, "shopsimrl": __version__,
            "build_seconds": round(time.perf_counter() - started, 3),
        }
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)", task_rows)
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _chunks(items: Iterator[Product], size: int, cancel: threading.Event) -> Iterator[list[Product]]:
    chunk: list[Product] = []
    for item in items:
        if not item.rowid % 256 and cancel.is_set():
            raise BuildCancelled()
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _insert_products(conn: sqlite3.Connection, products: int, seed: int, n_tasks: int,
                     progress: ProgressFn | None, cancel: threading.Event) -> list[Product]:
    """Insert every product and its index row; return the sampled goal candidates."""
    selector = random.Random(f"shopsim-candidates-{seed}")
    share = min(1.0, 3.0 * n_tasks / products)
    candidates: list[Product] = []
    done = 0
    for chunk in _chunks(CatalogGenerator(seed).products(products), _CHUNK, cancel):
        conn.executemany(_INSERT_PRODUCT, [p.to_row() for p in chunk])
        conn.executemany(_INSERT_FTS, [(p.rowid, *p.search_columns()) for p in chunk])
        candidates.extend(p for p in chunk if selector.random() < share)
        done += len(chunk)
        if progress:
            progress("products", done, products)
    return candidates


def _draft(product: Product, seed: int) -> tuple[dict[str, Any], str] | None:
    """Goal and instruction for one candidate; its own RNG keeps it independent of the others."""
    rng = random.Random(f"shopsim-task-{seed}-{product.rowid}")
    goal = make_goal(rng, product)
    return None if goal is None else (goal, make_instruction(rng, goal))


def _select_tasks(path: Path, candidates: list[Product], seed: int, n_tasks: int,
                  progress: ProgressFn | None, cancel: threading.Event) -> tuple[list[tuple], int]:
    """Draw goals from candidates, in order, until every split's quota is met.

    A goal is kept only when its instruction, used verbatim as the search query,
    ranks the goal product within the hit list: every task is solvable by search.
    Candidates of a split only serve that split, so no product is shared between
    splits.  The searches run on two threads (SQLite releases the GIL); the
    outcome does not depend on their timing.
    """
    quotas = split_quotas(n_tasks)
    local = threading.local()

    def solvable(draft: tuple[dict[str, Any], str], rowid: int) -> bool:
        if not hasattr(local, "conn"):
            local.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            local.conn.set_progress_handler(cancel.is_set, _CANCEL_CHECK_OPS)
            local.bounds = TermBounds.load(local.conn)
            opened.append(local.conn)
        return rowid in ranked_search(local.conn, query_tokens(draft[1]), local.bounds, MAX_HITS)

    opened: list[sqlite3.Connection] = []
    rows: list[tuple] = []
    made = dict.fromkeys(SPLITS, 0)
    rejected = 0
    pending = list(candidates)
    with ThreadPoolExecutor(max_workers=2) as pool:
        try:
            while pending and any(made[s] < quotas[s] for s in SPLITS):
                if cancel.is_set():
                    raise BuildCancelled()
                batch, pending = pending[:256], pending[256:]
                batch = [p for p in batch if made[p.split] < quotas[p.split]]
                drafts = [(p, _draft(p, seed)) for p in batch]
                drafts = [(p, d) for p, d in drafts if d is not None]
                verdicts = list(pool.map(lambda pd: solvable(pd[1], pd[0].rowid), drafts))
                for (product, (goal, instruction)), ok in zip(drafts, verdicts):
                    split = product.split
                    if not ok:
                        rejected += 1
                        continue
                    if made[split] >= quotas[split]:
                        continue
                    task_id = f"{split}-{made[split]:05d}"
                    rows.append((task_id, split, made[split], instruction, json.dumps(goal), product.rowid))
                    made[split] += 1
                if progress:
                    progress("tasks", len(rows), n_tasks)
        finally:
            for conn in opened:
                conn.close()
    return rows, rejected


async def build_catalog_async(products: int = DEFAULT_PRODUCTS, seed: int = DEFAULT_CATALOG_SEED,
                              cache_dir: str | os.PathLike[str] | None = None, **options: Any) -> Path:
    """:func:`build_catalog` on a worker thread, for an event loop.  Cancelling the awaiting task stops the
    build at its next check and waits for it (a fraction of a second) so its temporary file is gone before
    the cancellation goes on; asyncio alone would leave the thread building to the end."""
    cancel = threading.Event()
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, functools.partial(build_catalog, products, seed, cache_dir,
                                                          cancel=cancel, **options))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.set()
        with contextlib.suppress(BaseException):
            await future
        raise
