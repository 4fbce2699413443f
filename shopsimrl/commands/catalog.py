"""The catalog the ``env`` commands, ``measure`` and ``data export`` open: options, cache check, progress, load."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from shopsimrl.argtypes import cache_folder, cannot_write_in, int_range
from shopsimrl.defaults import DEFAULT_CATALOG_SEED, DEFAULT_PRODUCTS
from shopsimrl.env.build import MAX_PRODUCTS, MIN_PRODUCTS, ProgressFn, catalog_path
from shopsimrl.env.core import load_env
from shopsimrl.errors import UsageError

_STAGES = {"products": "products", "index": "search index", "tasks": "tasks (verified by search)"}


def catalog_args(parser: argparse.ArgumentParser) -> None:
    """The four options that name a catalog (and where it is cached)."""
    parser.add_argument("--products", type=int_range(MIN_PRODUCTS, MAX_PRODUCTS), default=DEFAULT_PRODUCTS,
                        help=f"catalog size (default {DEFAULT_PRODUCTS:,}, max {MAX_PRODUCTS:,})")
    parser.add_argument("--seed", type=int, default=DEFAULT_CATALOG_SEED, help=f"catalog seed (default {DEFAULT_CATALOG_SEED})")
    parser.add_argument("--tasks", type=int_range(1), default=None, help="number of tasks (default products/10, <= 2000)")
    parser.add_argument("--cache-dir", type=cache_folder, default=None,
                        help="where catalogs are cached (default $SHOPSIMRL_CACHE or ~/.cache/shopsimrl)")


def check_cache(products: int, seed: int, cache_dir: Path | None, tasks: int | None = None) -> None:
    """A catalog that is not built yet needs a cache folder it can be written in: refused before any work."""
    path = catalog_path(products, seed, cache_dir, tasks=tasks)
    if path.exists():
        return  # a read-only cache that holds the catalog is fine
    reason = cannot_write_in(path.parent)
    if reason is not None:
        raise UsageError(f"the catalog is not in {path.parent} yet and it cannot be built there ({reason}): "
                         f"choose another --cache-dir")


def with_progress(fn: Any, products: int) -> Any:
    """Run ``fn(progress)`` with a rich progress display for builds that take a while."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # rich: only for a long build

    if products < 50_000:
        return fn(None)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                  TimeElapsedColumn(), transient=False) as progress:
        bars: dict[str, Any] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = progress.add_task(_STAGES.get(stage, stage), total=total)
            progress.update(bars[stage], completed=done, total=total)

        callback: ProgressFn = report
        return fn(callback)


def load(args: argparse.Namespace, **env_kwargs: Any) -> Any:
    """The env on the catalog the options name, built first if it is not cached."""
    check_cache(args.products, args.seed, args.cache_dir, args.tasks)
    return with_progress(lambda cb: load_env(args.products, args.seed, args.cache_dir, tasks=args.tasks,
                                              progress=cb, **env_kwargs), args.products)
